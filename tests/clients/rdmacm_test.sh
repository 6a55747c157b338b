#!/usr/bin/env bash
# Debian's rdmacm-utils, qperf and perftest over librdmacm (issue 5), unmodified, server and
# client as two processes over softverbs0. Each run is bounded by a timeout; every process
# started here is waited for by PID; the CM names and the host registry are this run's own
# (SOFTVERBS_HOST). Usage: rdmacm_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-rdmacm-$$"
pass=0 fail=0

report() {  # report <ok 0|1> <label> <server log> <client log>
  if [ "$1" -eq 0 ]; then
    pass=$((pass + 1)); echo "ok   $2"
  else
    fail=$((fail + 1)); echo "FAIL $2"
    sed 's/^/  server: /' "$3" | tail -6
    sed 's/^/  client: /' "$4" | tail -6
  fi
}

# pair "<server cmd>" "<client cmd>" <client output regex> <label> [persistent]: both exit 0
# and the client prints the expected line. "PORT" in the commands is replaced by a random port.
# A persistent server (one that serves until killed, like cmtime's) is stopped by PID once the
# client is done.
pair() {
  local port=$(free_port) srv_log cli_log spid src crc ok=1
  srv_log=$(mktemp) cli_log=$(mktemp)
  timeout 60 ${1//PORT/$port} >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.3
  timeout 60 ${2//PORT/$port} >"$cli_log" 2>&1
  crc=$?
  if [ "${5:-}" = persistent ]; then
    kill "$spid" 2>/dev/null
    wait "$spid"
    src=0
  else
    wait "$spid"
    src=$?
  fi
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && grep -Eq "$3" "$cli_log"; then ok=0; fi
  report "$ok" "$4 :: $(grep -E "$3" "$cli_log" | tail -1 | tr -s ' \t' ' ' | cut -c1-70)" \
    "$srv_log" "$cli_log"
  rm -f "$srv_log" "$cli_log"
}

# rping: 1000 verified iterations (RDMA READ + WRITE + SEND per iteration), several sizes, IPv6.
pair "rping -s -a 127.0.0.1 -p PORT -C 1000" "rping -c -a 127.0.0.1 -p PORT -v -C 1000" \
     "rdma-ping-999:" "rping -v -C 1000"
for size in 4096 65535; do
  pair "rping -s -a 127.0.0.1 -p PORT -C 200 -S $size" \
       "rping -c -a 127.0.0.1 -p PORT -v -C 200 -S $size" "rdma-ping-199:" "rping -S $size"
done
pair "rping -s -a ::1 -p PORT -C 100" "rping -c -a ::1 -p PORT -v -C 100" "rdma-ping-99:" \
     "rping over ::1"
# ucmatose: one and ten connections, and rdma_migrate_id (-m).
pair "ucmatose -p PORT" "ucmatose -s 127.0.0.1 -p PORT" "return status 0" "ucmatose"
pair "ucmatose -p PORT -c 10" "ucmatose -s 127.0.0.1 -p PORT -c 10" "return status 0" "ucmatose -c 10"
pair "ucmatose -p PORT -c 4 -m" "ucmatose -s 127.0.0.1 -p PORT -c 4 -m" "return status 0" \
     "ucmatose -m (migrate)"
# udaddy: UD through SIDR, replies addressed from the received GRH (fixed port 7174: the
# per-run SOFTVERBS_HOST keeps it apart from other runs).
pair "udaddy" "udaddy -s 127.0.0.1" "return status 0" "udaddy"
# rdma_server / rdma_client: rdma_getaddrinfo, rdma_create_ep, synchronous ids, rdma_verbs.h.
pair "rdma_server -p PORT" "rdma_client -s 127.0.0.1 -p PORT" "rdma_client: end 0" \
     "rdma_server/rdma_client"
# cmtime: 100 connections, timed step by step.
pair "cmtime -p PORT -c 100" "cmtime -s 127.0.0.1 -p PORT -c 100" "^connect " "cmtime -c 100" \
     persistent

# qperf over the CM (-cm1): one server, each RC test for 1 s.
port=$((20000 + RANDOM % 20000))
qlog=$(mktemp)
timeout 120 qperf -lp "$port" >"$qlog" 2>&1 &
qpid=$!
sleep 0.3
for t in rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw rc_rdma_write_lat rc_compare_swap_mr \
         rc_fetch_add_mr; do
  out=$(timeout 30 qperf 127.0.0.1 -lp "$port" -t 1 -cm1 "$t" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && grep -Eq "(bw|latency|msg_rate) +=" <<<"$out"; then
    pass=$((pass + 1)); echo "ok   qperf -cm1 $t :: $(grep -E ' = ' <<<"$out" | tr -s ' ')"
  else
    fail=$((fail + 1)); echo "FAIL qperf -cm1 $t (rc=$rc): $out"
  fi
done
# Without the CM qperf addresses the peer by LID and sets no GRH: a RoCE device cannot carry
# that (ibv_modify_qp / ibv_create_ah refuse, as on RoCE hardware), so it must fail, not hang.
for t in uc_lat ud_lat; do
  out=$(timeout 30 qperf 127.0.0.1 -lp "$port" -t 1 "$t" 2>&1); rc=$?
  if [ "$rc" -ne 124 ] && grep -Eq "failed to (modify QP to RTR|create address handle)" <<<"$out"; then
    pass=$((pass + 1)); echo "ok   qperf $t without -cm1 fails cleanly (no GRH on RoCE)"
  else
    fail=$((fail + 1)); echo "FAIL qperf $t without -cm1 (rc=$rc): $out"
  fi
done
kill "$qpid" 2>/dev/null
wait "$qpid" 2>/dev/null
rm -f "$qlog"

# perftest with the connection made by rdma_cm (-R).
pair "ib_send_bw -d softverbs0 -x 1 -R -n 1000 -p PORT" \
     "ib_send_bw -d softverbs0 -x 1 -R -n 1000 -p PORT 127.0.0.1" '^ +65536 +1000 ' "ib_send_bw -R"
pair "ib_write_lat -d softverbs0 -x 1 -R -n 1000 -p PORT" \
     "ib_write_lat -d softverbs0 -x 1 -R -n 1000 -p PORT 127.0.0.1" '^ +2 +1000 ' "ib_write_lat -R"

# Nothing listens: rping's client sees RDMA_CM_EVENT_REJECTED with IBA reason 8 and exits.
out=$(timeout 20 rping -c -a 127.0.0.1 -p $((20000 + RANDOM % 20000)) -C 1 2>&1); rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 8" <<<"$out"; then
  pass=$((pass + 1)); echo "ok   rping to nowhere: REJECTED, error 8"
else
  fail=$((fail + 1)); echo "FAIL rping to nowhere (rc=$rc): $out"
fi
# mckey: a receiver and a sender join a group (IPv4 and IPv6; a send-only sender) and the
# datagrams sent to it arrive (udaddy-style UD over ibv_attach_mcast).
mc() {  # mc <label> <mckey args...>
  local label=$1 rlog slog rpid rrc src
  shift
  rlog=$(mktemp) slog=$(mktemp)
  timeout 30 mckey "$@" >"$rlog" 2>&1 &
  rpid=$!
  sleep 0.5
  timeout 30 mckey "$@" -s ${sender_extra:-} >"$slog" 2>&1
  src=$?
  wait "$rpid"
  rrc=$?
  local ok=1
  if [ "$src" -eq 0 ] && [ "$rrc" -eq 0 ] && grep -q "return status 0" "$rlog"; then ok=0; fi
  report "$ok" "mckey $label :: $(grep joined "$rlog" | head -1)" "$rlog" "$slog"
  rm -f "$rlog" "$slog"
}
mc "IPv4" -m 239.1.1.1 -b 127.0.0.1
mc "IPv6" -m ff0e::101 -b ::1
mc "2 groups, 512 B" -m 239.1.1.2 -b 127.0.0.1 -c 2 -S 512
sender_extra=-o mc "send-only sender" -m 239.1.1.3 -b 127.0.0.1
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "rdmacm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
