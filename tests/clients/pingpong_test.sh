#!/usr/bin/env bash
# Debian's ibv_*_pingpong, unmodified, server and client as two processes over softverbs0
# (issue "same-host data path"). Each run is bounded by a timeout; every process started here is
# waited for by PID. Usage: pingpong_test.sh <build dir> [quick]
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-pingpong-$$"
pass=0 fail=0

# run <program> <args...>: server and client, both must exit 0 and print their throughput lines.
run() {
  local port=$(free_port) srv_log cli_log spid src crc
  srv_log=$(mktemp) cli_log=$(mktemp)
  timeout 60 "$@" -p "$port" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.3
  timeout 60 "$@" -p "$port" 127.0.0.1 >"$cli_log" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && grep -q "iters in" "$cli_log" && grep -q "iters in" "$srv_log"; then
    pass=$((pass + 1))
    echo "ok   $* :: $(grep 'iters in' "$cli_log")"
  else
    fail=$((fail + 1))
    echo "FAIL $* (server rc=$src, client rc=$crc)"
    sed 's/^/  server: /' "$srv_log" | tail -5
    sed 's/^/  client: /' "$cli_log" | tail -5
  fi
  rm -f "$srv_log" "$cli_log"
}

for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong; do
  run "$prog" -g 1 -n 10000
  for size in 1 4096 65536; do
    run "$prog" -g 1 -n 10000 -s "$size"
    run "$prog" -g 1 -n 2000 -s "$size" -e
  done
done
run ibv_ud_pingpong -g 1 -n 10000
# ibv_ud_pingpong refuses a message larger than the port's MTU, which follows this namespace's
# interfaces as rxe's does (1024 next to a 1500-byte Ethernet): the largest UD message it allows.
for size in 1 "$(expected_active_mtu)"; do
  run ibv_ud_pingpong -g 1 -n 10000 -s "$size"
  run ibv_ud_pingpong -g 1 -n 2000 -s "$size" -e
done
# The link-local GID (index 0) works as well as an IP-based one.
run ibv_rc_pingpong -g 0 -n 1000

# Without a GRH (no -g) RoCE cannot address the peer: both sides must fail, not hang.
port=$(free_port)
timeout 20 ibv_rc_pingpong -p "$port" -n 10 >/dev/null 2>&1 &
spid=$!
sleep 0.3
timeout 20 ibv_rc_pingpong -p "$port" -n 10 127.0.0.1 >/dev/null 2>&1
crc=$?
wait "$spid"
src=$?
if [ "$crc" -ne 0 ] && [ "$crc" -ne 124 ] && [ "$src" -ne 124 ]; then
  pass=$((pass + 1)); echo "ok   ibv_rc_pingpong without -g fails cleanly"
else
  fail=$((fail + 1)); echo "FAIL ibv_rc_pingpong without -g (server rc=$src, client rc=$crc)"
fi

# XRC (ibv_xsrq_pingpong, perftest -c XRC): xrc_test.sh.

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "pingpong: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
