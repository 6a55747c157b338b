#!/usr/bin/env bash
# Debian's perftest, unmodified, over the DC transport (-c DC: a DCI per client QP, DCTs at the
# server, mlx5dv_create_qp and mlx5dv_wr_set_dc_addr): server and client as two processes, with
# softverbs0's mlx5 identity (perftest takes its mlx5dv paths only when mlx5dv_is_supported).
# A time-bounded subset; the numbers live in bench/. Every process started here is waited for by
# PID. Usage: perftest_dc_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-perftest-dc-$$"
pass=0 fail=0

# run <program> <args...>: both sides must exit 0 and the client must print a result row.
run() {
  local port=$(free_port) srv_log cli_log spid src crc
  srv_log=$(mktemp) cli_log=$(mktemp)
  SOFTVERBS_MLX5_IDENTITY=1 timeout 60 "$@" -d softverbs0 -x 1 -p "$port" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  SOFTVERBS_MLX5_IDENTITY=1 timeout 60 "$@" -d softverbs0 -x 1 -p "$port" 127.0.0.1 >"$cli_log" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  local row
  row=$(grep -E '^\s+[0-9]+\s+[0-9]+\s+[0-9.]+' "$cli_log" | tail -1 | tr -s ' \t' ' ')
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && [ -n "$row" ] && grep -q 'Connection type : DC' "$cli_log"; then
    pass=$((pass + 1)); echo "ok   $* ::$row"
  else
    fail=$((fail + 1)); echo "FAIL $* (server rc=$src, client rc=$crc)"
    sed 's/^/  server: /' "$srv_log" | tail -6
    sed 's/^/  client: /' "$cli_log" | tail -6
  fi
  rm -f "$srv_log" "$cli_log"
}

for t in send write read atomic; do
  run "ib_${t}_bw" -c DC -n 500
  run "ib_${t}_bw" -c DC -n 250 -q 4
done
run ib_write_lat -c DC -n 1000
run ib_send_lat -c DC -n 1000
run ib_read_lat -c DC -n 1000

# Without the identity perftest does not take its mlx5dv path: it asks ibv_create_qp for an
# IBV_QPT_DRIVER QP, which softverbs refuses (EOPNOTSUPP, with the reason logged). Both sides
# must fail, and say why.
port=$(free_port) srv_log=$(mktemp) cli_log=$(mktemp)
SOFTVERBS_LOG=error timeout 30 ib_write_bw -d softverbs0 -x 1 -c DC -p "$port" >"$srv_log" 2>&1 &
spid=$!
sleep 0.5
SOFTVERBS_LOG=error timeout 30 ib_write_bw -d softverbs0 -x 1 -c DC -p "$port" 127.0.0.1 >"$cli_log" 2>&1
crc=$?
wait "$spid"
src=$?
why='ibv_create_qp(pd 0x[0-9a-f]*): IBV_QPT_DRIVER QPs are created through their provider'
if [ "$src" -ne 0 ] && [ "$crc" -ne 0 ] && grep -q "$why" "$srv_log" && grep -q "$why" "$cli_log"; then
  pass=$((pass + 1)); echo "ok   ib_write_bw -c DC without SOFTVERBS_MLX5_IDENTITY: refused as documented"
else
  fail=$((fail + 1)); echo "FAIL ib_write_bw -c DC without SOFTVERBS_MLX5_IDENTITY (server rc=$src, client rc=$crc)"
  tail -5 "$srv_log" "$cli_log"
fi
rm -f "$srv_log" "$cli_log"

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "perftest DC: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
