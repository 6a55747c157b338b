#!/usr/bin/env bash
# Debian's perftest, unmodified, server and client as two processes over softverbs0: a reduced
# matrix bounded in time (the full matrix and the numbers live in bench/). Every process started
# here is waited for by PID. Usage: perftest_test.sh <build dir>
set -u
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-perftest-$$"
pass=0 fail=0

# run <program> <args...>: both sides must exit 0 and the client must print a result row.
run() {
  local port=$((18000 + RANDOM % 20000)) srv_log cli_log spid src crc
  srv_log=$(mktemp) cli_log=$(mktemp)
  timeout 90 "$@" -d softverbs0 -x 1 -p "$port" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  timeout 90 "$@" -d softverbs0 -x 1 -p "$port" 127.0.0.1 >"$cli_log" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  local row
  row=$(grep -E '^\s+[0-9]+\s+[0-9]+\s+[0-9.]+' "$cli_log" | tail -1 | tr -s ' \t' ' ')
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && [ -n "$row" ]; then
    pass=$((pass + 1)); echo "ok   $* ::$row"
  else
    fail=$((fail + 1)); echo "FAIL $* (server rc=$src, client rc=$crc)"
    sed 's/^/  server: /' "$srv_log" | tail -6
    sed 's/^/  client: /' "$cli_log" | tail -6
  fi
  rm -f "$srv_log" "$cli_log"
}

for t in send write read atomic; do
  run "ib_${t}_lat" -n 2000
  run "ib_${t}_bw" -n 1000
done
run ib_write_bw -n 1000 --use_old_post_send   # ibv_post_send instead of ibv_qp_ex
run ib_send_bw -n 1000 -c UC
run ib_write_bw -n 1000 -c UC
run ib_send_lat -n 1000 -c UC
run ib_send_bw -n 1000 -c UD
run ib_send_lat -n 1000 -c UD
run ib_write_bw -n 500 -q 8
run ib_send_bw -n 500 -q 8
run ib_write_bw -n 500 -b
run ib_send_bw -n 500 -b
run ib_send_lat -n 1000 -e
run ib_send_bw -n 500 -e
run ib_write_bw -n 200 -a --report_gbits

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "perftest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
