#!/usr/bin/env bash
# `softverbs trace -w FILE -- PROG` on the same-host path (issue 15, item 7): Debian's
# ibv_rc_pingpong, ib_write_bw, ib_read_bw, ib_atomic_bw and ibv_ud_pingpong, server and client on one host, traced; tshark must
# dissect the capture as RoCEv2 (the opcodes each exchange implies, consecutive PSNs per QP, every
# request that asks for an answer answered) and every packet's ICRC must hold (icrc_check.py,
# zlib's CRC, independent of softverbs). Every process is bounded by a timeout and waited for.
# Usage: trace_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
export SOFTVERBS_HOST="clients-trace-$$"
sv="$build/bin/softverbs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

check() {  # check <name> <command...>
  local name=$1; shift
  if "$@" >"$work/check.log" 2>&1; then
    pass=$((pass + 1)); echo "ok   $name :: $(tail -1 "$work/check.log")"
  else
    fail=$((fail + 1)); echo "FAIL $name"; sed 's/^/  /' "$work/check.log" | tail -8
  fi
}

if ! command -v tshark >/dev/null; then
  echo "SKIP: tshark is not installed (tools/install_deps.sh installs it)"
  exit 0
fi

# traced <name> <pcap> <program> <server args> -- <client args>: both under one `softverbs trace`.
traced() {
  local name=$1 pcap=$2 prog=$3; shift 3
  local port=$(free_port) srv=() cli=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  timeout 120 "$sv" trace -w "$pcap" -- bash -c '
    timeout 60 "$0" "$@" >"'"$work"'/server.log" 2>&1 &
    s=$!; sleep 0.5
    timeout 60 "$0" "$@" 127.0.0.1 >"'"$work"'/client.log" 2>&1; c=$?
    wait $s; e=$?
    [ $c -eq 0 ] && [ $e -eq 0 ]' "$prog" "${srv[@]}" -p "$port" >"$work/trace.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && [ -s "$pcap" ]; then
    pass=$((pass + 1)); echo "ok   $name :: $(tail -1 "$work/trace.log")"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc=$rc)"
    for f in trace server client; do sed "s/^/  $f: /" "$work/$f.log" | tail -4; done
  fi
}

# RC SEND of 3000 bytes in 1024-byte packets: FIRST, MIDDLE, LAST (0, 1, 2) and ACK (17).
traced "ibv_rc_pingpong traced" "$work/rc.pcap" ibv_rc_pingpong -g 1 -n 20 -s 3000 -m 1024 --
check "tshark: RC SEND FIRST/MIDDLE/LAST and ACKs, PSNs consecutive, each answered" \
  python3 "$here/trace_check.py" "$work/rc.pcap" 0,1,2,17
check "ICRC of every packet in the RC capture" python3 "$here/icrc_check.py" "$work/rc.pcap"

# RDMA WRITE of 8 KiB in 1024-byte packets: WRITE FIRST/MIDDLE/LAST (6, 7, 8) and ACKs.
traced "ib_write_bw traced" "$work/write.pcap" ib_write_bw -d softverbs0 -x 1 -n 20 -s 8192 -m 1024 --
check "tshark: RC WRITE FIRST/MIDDLE/LAST and ACKs, PSNs consecutive, each answered" \
  python3 "$here/trace_check.py" "$work/write.pcap" 6,7,8,17
check "ICRC of every packet in the WRITE capture" python3 "$here/icrc_check.py" "$work/write.pcap"

# RDMA READ of 8 KiB: the request (12) and its responses FIRST/MIDDLE/LAST (13, 14, 15).
traced "ib_read_bw traced" "$work/read.pcap" ib_read_bw -d softverbs0 -x 1 -n 20 -s 8192 -m 1024 --
check "tshark: RC READ request and READ responses FIRST/MIDDLE/LAST, PSNs consecutive, each answered" \
  python3 "$here/trace_check.py" "$work/read.pcap" 12,13,14,15
check "ICRC of every packet in the READ capture" python3 "$here/icrc_check.py" "$work/read.pcap"

# Atomics: FETCH_ADD (20) and its ATOMIC ACKNOWLEDGE (18) with the original value.
traced "ib_atomic_bw traced" "$work/atomic.pcap" ib_atomic_bw -d softverbs0 -x 1 -n 20 --
check "tshark: RC FETCH_ADD and ATOMIC ACKNOWLEDGE, PSNs consecutive, each answered" \
  python3 "$here/trace_check.py" "$work/atomic.pcap" 20,18
check "ICRC of every packet in the atomic capture" python3 "$here/icrc_check.py" "$work/atomic.pcap"

# UD: SEND_ONLY datagrams (100), not answered.
traced "ibv_ud_pingpong traced" "$work/ud.pcap" ibv_ud_pingpong -g 1 -n 20 -s 512 --
check "tshark: UD SEND_ONLY" python3 "$here/trace_check.py" "$work/ud.pcap" 100
check "ICRC of every packet in the UD capture" python3 "$here/icrc_check.py" "$work/ud.pcap"

# Without trace nothing is captured: no SOFTVERBS_PCAP, no file (the tap is not installed).
check "trace leaves no per-process files behind" bash -c "! ls -d '$work'/*.parts-* 2>/dev/null"

rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "trace: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
