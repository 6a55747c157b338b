#!/usr/bin/env bash
# Debian's perftest, unmodified, server and client as two processes over softverbs0.
#   perftest_test.sh <build dir>          a reduced matrix bounded in time (CI)
#   perftest_test.sh --full <build dir>   every program x connection type x option of the issue,
#                                         with and without the mlx5 identity (ibv_wr_* API on)
# A combination perftest's own parser refuses (e.g. -q on a latency test, UC READ) is listed
# as n/a. Every process started here is waited for by PID.
set -u
source "$(dirname "$0")/common.sh"
full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-perftest-$$"
pass=0 fail=0 na=0
iters_bw=${PERFTEST_ITERS_BW:-500}
iters_lat=${PERFTEST_ITERS_LAT:-1000}

# run [IDENTITY=1] <program> <args...>: both sides must exit 0 and the client must print a result
# row. With IDENTITY=1 the device presents the mlx5 identity, perftest then posts through
# ibv_qp_ex (ibv_wr_*), and the client must say "ibv_wr* API : ON".
run() {
  local identity=0
  if [ "$1" = "IDENTITY=1" ]; then identity=1; shift; fi
  local port=$(free_port) srv_log cli_log spid src crc row
  srv_log=$(mktemp) cli_log=$(mktemp)
  # perftest's parser refuses some combinations before connecting: not ours to pass or fail.
  # (Nobody listens on $port yet: a combination it accepts fails at once to connect.)
  SOFTVERBS_MLX5_IDENTITY=$identity timeout 10 "$@" -d softverbs0 -x 1 -p "$port" 127.0.0.1 >"$cli_log" 2>&1 </dev/null
  if grep -qE 'Parser function exited with Error|not possible in|only possible in|only available|not available on' "$cli_log"; then
    na=$((na + 1)); echo "n/a  $* ($(grep -m1 -E 'possible|available' "$cli_log" | sed 's/^ *//'))"
    rm -f "$srv_log" "$cli_log"
    return
  fi
  for attempt in 1 2 3; do
    SOFTVERBS_MLX5_IDENTITY=$identity timeout 120 "$@" -d softverbs0 -x 1 -p "$port" >"$srv_log" 2>&1 &
    spid=$!
    sleep 0.5
    SOFTVERBS_MLX5_IDENTITY=$identity timeout 120 "$@" -d softverbs0 -x 1 -p "$port" 127.0.0.1 >"$cli_log" 2>&1
    crc=$?
    wait "$spid"
    src=$?
    # Another program took the port between free_port and the server's bind: try another one.
    grep -q "Couldn't listen to port" "$srv_log" || break
    port=$(free_port)
  done
  row=$(grep -E '^\s+[0-9]+\s+[0-9]+\s+[0-9.]+' "$cli_log" | tail -1 | tr -s ' \t' ' ')
  local api_ok=1
  if [ "$identity" = 1 ] && ! grep -qE 'ibv_wr\* API\s*: ON' "$cli_log"; then api_ok=0; fi
  local tag="$*"
  [ "$identity" = 1 ] && tag="$tag [ibv_wr API]"
  if [ "$crc" -ne 0 ] && grep -q 'Message size cannot be changed for Atomic tests' "$cli_log"; then
    na=$((na + 1)); echo "n/a  $tag (perftest: message size cannot be changed for atomic tests)"
  elif [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && [ -n "$row" ] && [ "$api_ok" = 1 ]; then
    pass=$((pass + 1)); echo "ok   $tag ::$row"
  else
    fail=$((fail + 1)); echo "FAIL $tag (server rc=$src, client rc=$crc, ibv_wr API as expected=$api_ok)"
    sed 's/^/  server: /' "$srv_log" | tail -6
    sed 's/^/  client: /' "$cli_log" | tail -6
  fi
  rm -f "$srv_log" "$cli_log"
}

iters() { case "$1" in *_lat) echo "$iters_lat" ;; *) echo "$iters_bw" ;; esac; }

if [ "$full" = 1 ]; then
  for t in send write read atomic; do
    for kind in bw lat; do
      prog="ib_${t}_${kind}"
      for conn in RC UC UD; do
        for opt in "" "-q 8" "-q 64" "-b" "-a" "-e" "--report_gbits"; do
          n=$(iters "$prog")
          [ "$opt" = "-a" ] && n=100
          # shellcheck disable=SC2086
          run "$prog" -c "$conn" -n "$n" $opt
          # shellcheck disable=SC2086
          run IDENTITY=1 "$prog" -c "$conn" -n "$n" $opt
        done
      done
    done
  done
else
  for t in send write read atomic; do
    run "ib_${t}_lat" -n 2000
    run "ib_${t}_bw" -n 1000
    run IDENTITY=1 "ib_${t}_bw" -n 500     # posted through ibv_qp_ex
  done
  run IDENTITY=1 ib_read_lat -n 500
  run IDENTITY=1 ib_atomic_lat -n 500
  run ib_write_bw -n 1000 --use_old_post_send   # ibv_post_send even with the identity's defaults
  run ib_send_bw -n 1000 -c UC
  run ib_write_bw -n 1000 -c UC
  run ib_send_lat -n 1000 -c UC
  run ib_write_lat -n 1000 -c UC
  run ib_send_bw -n 1000 -c UD
  run ib_send_lat -n 1000 -c UD
  run ib_send_lat -n 100 -c UD -a
  run ib_write_bw -n 500 -q 8
  run ib_send_bw -n 500 -q 8
  run ib_write_bw -n 200 -q 64
  run IDENTITY=1 ib_send_bw -n 200 -q 64
  run ib_write_bw -n 500 -b
  run ib_send_bw -n 500 -b
  run ib_send_lat -n 1000 -e
  run ib_send_bw -n 500 -e
  run ib_write_bw -n 200 -a --report_gbits
  # Buffers in a MAP_SHARED file (perftest --mmap): the initiator maps the peer's file and copies
  # with memcpy (docs/data-path.md, shared-backed registrations). perftest maps, never creates it.
  mmap_file="/dev/shm/sv-perftest-mmap-$$"
  trap 'rm -f "$mmap_file"' EXIT
  truncate -s 64M "$mmap_file"
  run ib_write_bw -n 1000 --mmap="$mmap_file"
  run ib_read_bw -n 1000 --mmap="$mmap_file"
  rm -f "$mmap_file"
fi

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "perftest: $pass passed, $fail failed, $na refused by perftest's parser (n/a)"
[ "$fail" -eq 0 ]
