#!/usr/bin/env bash
# librdmacm across hosts (issue 12, docs/cm.md "Across hosts"): two network namespaces joined by
# a veth pair this test creates; Debian's rping, ucmatose, udaddy, rdma_server / rdma_client,
# cmtime, qperf -cm1 and perftest -R, unmodified, server in one namespace and client in the
# other; and rping's DISCONNECTED when its peer process is killed. Their CMs meet with IB CM MADs on QP1 over RoCEv2 (REQ / REP / RTU, DREQ / DREP, SIDR
# for UD), not with the same-host sockets.
#
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: cm_netns_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/netns_lib.sh"
build=${1:?build dir}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v rping >/dev/null; then
  echo "skip: needs root, iproute2 and rdmacm-utils"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-cmnetns-$$"
ns_a="svcm-$$-a" ns_b="svcm-$$-b" veth_a="svcm$$a" veth_b="svcm$$b"
net="10.78.$(( $$ % 250 ))"
show() {
  tail -n 15 "$logs/server" | sed 's/^/  server: /'
  tail -n 15 "$logs/client" | sed 's/^/  client: /'
}

netns_setup "$ns_a" "$ns_b"
netns_veth "$ns_a" "$veth_a" "$net.1/24" "$ns_b" "$veth_b" "$net.2/24"

# pair <what> <timeout> <server command> -- <client command>: server in a, client in b; both exit 0.
# With PERSISTENT=1, the server serves until killed (cmtime, qperf): it is stopped by its PID once
# the client is done, and only the client's status counts.
pair() {
  local what=$1 limit=$2 server src crc scmd=() ccmd=()
  shift 2
  while [ "$1" != "--" ]; do scmd+=("$1"); shift; done
  shift
  ccmd=("$@")
  local attempt
  for attempt in 1 2 3 4 5; do
    ip netns exec "$ns_a" timeout "$limit" "${scmd[@]}" >"$logs/server" 2>&1 &
    server=$!
    sleep 0.5
    ip netns exec "$ns_b" timeout "$limit" "${ccmd[@]}" >"$logs/client" 2>&1
    crc=$?
    # perftest -R (PERFTEST_RACE=1): after the exchange over its first connection, the server
    # destroys that listener and listens again for the test's QPs while the client connects
    # them at once; a REQ in between meets no listener and is answered REJ 8, as the kernel's
    # CM answers it, and perftest's own retry reuses the identifiers it has just destroyed. The
    # race is perftest's (docs/cm.md, "Across hosts"): run it again, at most five times.
    if [ -n "${PERFTEST_RACE:-}" ] && [ "$crc" -ne 0 ] && [ "$attempt" -lt 5 ] &&
       grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$logs/client"; then
      echo "     (attempt $attempt: perftest's client connected before its server listened again: REJ 8; again)"
      kill "$server" 2>/dev/null
      wait "$server" 2>/dev/null
      continue
    fi
    break
  done
  if [ -n "${PERSISTENT:-}" ]; then
    kill "$server" 2>/dev/null
    wait "$server"
    src=0
  else
    wait "$server"
    src=$?
  fi
  check "$what (server rc=$src, client rc=$crc)" test "$src" -eq 0 -a "$crc" -eq 0 || show
}

port=$(free_port)
pair "rping -C 10 -v across namespaces (REQ/REP/RTU, RC traffic, DREQ/DREP)" 30 \
  rping -s -a "$net.1" -p "$port" -C 10 -v -- rping -c -a "$net.1" -p "$port" -C 10 -v
n=$(grep -c "ping data: rdma-ping-" "$logs/client")
check "the rping client printed its 10 verified pings ($n)" test "$n" -eq 10 || show

# Two servers on one address. A peer's QP1 sends every MAD from one UDP source port (0xD872, as
# rxe's), so the kernel hands them all to the same member of the address's UDP 4791 group: one
# of the two servers (persistent, -P: both stay members throughout). The other's REQ, RTU and
# DREQ/DREP reach it through the host, handed over by process slot (docs/cm.md, Dispatch);
# without that, one of the two clients never connects.
p1=$(free_port)
p2=$(free_port)
ip netns exec "$ns_a" timeout 60 rping -s -P -a "$net.1" -p "$p1" -C 5 -v >"$logs/server1" 2>&1 &
s1=$!
ip netns exec "$ns_a" timeout 60 rping -s -P -a "$net.1" -p "$p2" -C 5 -v >"$logs/server2" 2>&1 &
s2=$!
sleep 0.5
ip netns exec "$ns_b" timeout 20 rping -c -a "$net.1" -p "$p1" -C 5 -v >"$logs/client1" 2>&1
c1=$?
ip netns exec "$ns_b" timeout 20 rping -c -a "$net.1" -p "$p2" -C 5 -v >"$logs/client2" 2>&1
c2=$?
kill "$s1" "$s2" 2>/dev/null
wait "$s1" "$s2" 2>/dev/null
n1=$(grep -c "ping data: rdma-ping-" "$logs/client1")
n2=$(grep -c "ping data: rdma-ping-" "$logs/client2")
check "two rping servers on one address, one client each: both clients connect and ping (rc $c1 $c2, pings $n1 $n2)" \
  test "$c1$c2/$n1$n2" = "00/55" ||
  for f in server1 server2 client1 client2; do tail -n 5 "$logs/$f" | sed "s/^/  $f: /"; done

# Nothing listens on the port: the remote host's CM answers the REQ with REJ reason 8
# (invalid service ID), which rping reports as the kernel's CM makes it. On a softverbs host the
# CM is in its processes: one (a server on another port) must be there to answer.
port=$(free_port)
other=$(free_port)
ip netns exec "$ns_a" timeout 20 rping -s -a "$net.1" -p "$other" -C 1 >"$logs/server" 2>&1 &
server=$!
sleep 0.5
ip netns exec "$ns_b" timeout 20 rping -c -a "$net.1" -p "$port" -C 1 >"$logs/client" 2>&1
check "a REQ to a port nobody listens to on the other host: REJECTED, error 8" \
  grep -q "RDMA_CM_EVENT_REJECTED, error 8" "$logs/client" || tail -n 5 "$logs/client"
# The server's CM agent counted it: `softverbs status --json` (docs/device.md) shows the REQ
# received and the REJ sent by type.
ip netns exec "$ns_a" "$build/bin/softverbs" status --json >"$logs/status" 2>&1
cm_counts=$(python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
cm = [p["wire"]["cm"] for p in doc["processes"] if p["wire"] and p["wire"].get("cm")]
print(" ".join(f"{k}={c[k][t]}" for c in cm for k, t in (("received", "REQ"), ("sent", "REJ"))))' "$logs/status" 2>&1)
check "softverbs status --json counts the CM's MADs by type ($cm_counts)" \
  eval '[[ "$cm_counts" =~ received=[1-9].*sent=[1-9] ]]' || tail -n 5 "$logs/status"
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

if command -v ucmatose >/dev/null; then
  port=$(free_port)
  pair "ucmatose across namespaces (2 connections, 10 messages each)" 30 \
    ucmatose -b "$net.1" -p "$port" -c 2 -C 10 -- ucmatose -s "$net.1" -p "$port" -c 2 -C 10
  # (udaddy's port is fixed, 7174; its -p is the port space)
  pair "udaddy across namespaces (SIDR_REQ / SIDR_REP, UD messages)" 30 \
    udaddy -b "$net.1" -c 2 -C 10 -- udaddy -s "$net.1" -c 2 -C 10
fi

# rdma_getaddrinfo, rdma_create_ep and synchronous identifiers (no event channel).
port=$(free_port)
pair "rdma_server / rdma_client across namespaces (synchronous identifiers)" 30 \
  rdma_server -s "$net.1" -p "$port" -- rdma_client -s "$net.1" -p "$port"
check "rdma_client ended with 0" grep -q "rdma_client: end 0" "$logs/client" || show
# cmtime: 10 connections set up and torn down in parallel, each step timed.
port=$(free_port)
PERSISTENT=1 pair "cmtime -c 10 across namespaces" 30 \
  cmtime -b "$net.1" -p "$port" -c 10 -- cmtime -s "$net.1" -p "$port" -c 10
check "cmtime timed its connects" grep -q "^connect " "$logs/client" || show

if command -v qperf >/dev/null; then
  # qperf -cm1: its RC tests connect through librdmacm (qperf's own TCP carries the test setup).
  port=$(free_port)
  PERSISTENT=1 pair "qperf -cm1 rc_bw rc_lat across namespaces" 40 \
    qperf -lp "$port" -- qperf "$net.1" -lp "$port" -t 1 -cm1 rc_bw rc_lat
  check "qperf reported rc_bw and rc_lat" eval 'grep -q "bw *=" "$logs/client" && grep -q "latency *=" "$logs/client"' || show
fi
if command -v ib_send_bw >/dev/null; then
  # perftest -R: the QPs connect through librdmacm instead of perftest's TCP exchange.
  port=$(free_port)
  PERFTEST_RACE=1 pair "ib_send_bw -R across namespaces" 40 \
    ib_send_bw -d softverbs0 -R -n 100 -p "$port" -- ib_send_bw -d softverbs0 -R -n 100 -p "$port" "$net.1"
  check "ib_send_bw -R reported its bandwidth" grep -qE '^ +65536 +100 ' "$logs/client" || show
  port=$(free_port)
  PERFTEST_RACE=1 pair "ib_write_lat -R across namespaces" 40 \
    ib_write_lat -d softverbs0 -R -n 100 -p "$port" -- ib_write_lat -d softverbs0 -R -n 100 -p "$port" "$net.1"
  check "ib_write_lat -R reported its latency" grep -qE '^ +2 +100 ' "$logs/client" || show
fi

# A peer process killed (SIGKILL) in the middle of a connection. The kernel's CM destroys a dead
# process's identifiers and sends a DREQ for each established connection (cm.c cm_destroy_id);
# for a softverbs process its guard does (transport/wire/last_words.h). The survivor gets
# RDMA_CM_EVENT_DISCONNECTED at once and, as rping does then, ends. Without it, a survivor
# that sends learns of the death only when its RC retries run out (about 17 s here: its QP's
# error makes rping disconnect), and one that only waits never does.
# death <victim>: one run; sets rc, took, other. True if the survivor got DISCONNECTED and ended
# within 8 s.
death() {
  local victim=$1 port server client dead survivor start
  port=$(free_port)
  # (softverbs' own account of the CM and the guard, shown if the check fails.)
  rm -f "$logs/server.svlog" "$logs/client.svlog"
  ip netns exec "$ns_a" env SOFTVERBS_LOG=info SOFTVERBS_LOG_FILE="$logs/server.svlog" \
    timeout 40 rping -s -a "$net.1" -p "$port" -C 100000000 >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$ns_b" env SOFTVERBS_LOG=info SOFTVERBS_LOG_FILE="$logs/client.svlog" \
    timeout 40 rping -c -a "$net.1" -p "$port" -C 100000000 -v >"$logs/client" 2>&1 &
  client=$!
  # Connected and pinging: the client's first verified ping.
  for _ in $(seq 150); do grep -q "ping data" "$logs/client" && break; sleep 0.1; done
  if [ "$victim" = client ]; then dead=$client survivor=$server; else dead=$server survivor=$client; fi
  # rping is the child of the `timeout` started above: killed by its parent's PID.
  kill_children KILL "$dead"
  start=$SECONDS
  wait "$survivor"
  rc=$?
  wait "$dead" 2>/dev/null
  took=$((SECONDS - start))
  other=$([ "$victim" = client ] && echo server || echo client)
  grep -q "DISCONNECT EVENT" "$logs/$other" && [ "$rc" -ne 124 ] && [ "$took" -lt 8 ]
}
svlogs() { for f in server client; do tail -n 12 "$logs/$f.svlog" 2>/dev/null | sed "s/^/  $f log: /"; done; }
for victim in client server; do
  ok=0
  if death "$victim"; then
    ok=1
  else
    # Seen once, in CI's ASan stage (2026-11-24): the server learned of the killed client only
    # from its RC retries (17 s), no DREQ handled. Not reproduced in runs here; the logs of that
    # attempt are printed (the CM's DREQ and the guard's lines) and the scenario runs once more.
    echo "     (rping $victim killed, attempt 1: no DISCONNECTED in time, rc=$rc after $took s; its logs, then once more)"
    show
    svlogs
    death "$victim" && ok=1
  fi
  check "rping $victim killed: the $other gets DISCONNECTED from the dead process's host and ends (rc=$rc after ${took} s)" \
    test "$ok" = 1 || { show; svlogs; }
done

netns_finish
