#!/usr/bin/env bash
# XRC (issue 13 part 1) through real clients, unmodified: Debian's ibv_xsrq_pingpong (one server,
# one and two clients: each client's XRC_SEND QPs reach the server's XRC_RECV QPs and land on
# the SRQ each message names) and perftest -c XRC (send/write/read, bw and lat), server and
# clients as separate processes over softverbs0. Every process is bounded by a timeout and
# waited for by PID. Usage: xrc_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-xrc-$$"
pass=0 fail=0

report() {  # report <ok?> <label> <server log> <client logs...>
  local ok=$1 label=$2 srv=$3
  shift 3
  if [ "$ok" = 1 ]; then
    pass=$((pass + 1)); echo "ok   $label"
  else
    fail=$((fail + 1)); echo "FAIL $label"
    sed 's/^/  server: /' "$srv" | tail -8
    for c in "$@"; do sed 's/^/  client: /' "$c" | tail -8; done
  fi
}

# xsrq <clients> <args...>: one server for <clients> clients; all must exit 0, and the server
# must have finished its exchanges (every side prints "success" once its sends and receives
# completed: xsrq_pingpong counts them per client).
xsrq() {
  local n=$1; shift
  local port=$(free_port) srv_log spid src ok=1 i
  local -a cli_logs=() cpids=()
  srv_log=$(mktemp)
  timeout 60 ibv_xsrq_pingpong -g 1 -c "$n" -p "$port" "$@" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  for i in $(seq 1 "$n"); do
    cli_logs+=("$(mktemp)")
    timeout 60 ibv_xsrq_pingpong -g 1 -p "$port" "$@" 127.0.0.1 >"${cli_logs[-1]}" 2>&1 &
    cpids+=($!)
  done
  for i in "${!cpids[@]}"; do
    wait "${cpids[$i]}" || ok=0
    grep -q "^success" "${cli_logs[$i]}" || ok=0
  done
  wait "$spid" || ok=0
  grep -q "^success" "$srv_log" || ok=0
  report "$ok" "ibv_xsrq_pingpong -c $n $*" "$srv_log" "${cli_logs[@]}"
  rm -f "$srv_log" "${cli_logs[@]}"
}

# perf <program> <args...>: both sides exit 0 and the client prints a result row.
perf() {
  local port=$(free_port) srv_log cli_log spid src crc ok=1
  srv_log=$(mktemp) cli_log=$(mktemp)
  timeout 60 "$@" -c XRC -d softverbs0 -x 1 -p "$port" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  timeout 60 "$@" -c XRC -d softverbs0 -x 1 -p "$port" 127.0.0.1 >"$cli_log" 2>&1 || ok=0
  wait "$spid" || ok=0
  grep -qE '^\s+[0-9]+\s+[0-9]+\s+[0-9.]+' "$cli_log" || ok=0
  report "$ok" "$* -c XRC :: $(grep -E '^\s+[0-9]+\s+[0-9]+\s+[0-9.]+' "$cli_log" | tail -1 | tr -s ' \t' ' ')" \
    "$srv_log" "$cli_log"
  rm -f "$srv_log" "$cli_log"
}

xsrq 1 -n 50
xsrq 1 -n 20 -s 65536
xsrq 2 -n 20 -e
for t in send write read; do
  perf "ib_${t}_bw" -n 200
  perf "ib_${t}_lat" -n 200
done
perf ib_send_bw -n 200 -q 4

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "xrc: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
