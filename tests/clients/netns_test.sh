#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair that this test creates
# (issue 11). Debian's ibv_rc_pingpong, unmodified, server in one namespace and client in the
# other, each with the GID of its own namespace's address.
#
# RC, UC and UD travel between the namespaces as RoCEv2 packets (IPv4 and IPv6 GIDs): the
# ibv_*_pingpongs and perftest's RC tests (SEND, WRITE, READ, atomics; bandwidth and latency)
# complete both ways.
#
# Tag matching: a TM SRQ receiving from a RoCE peer matches its tags and does the rendezvous
# READ and FIN over the wire (wire_tm_peer.py).
#
# Regression for issue 11's defect: the RC client's QP is connected to a QP number at a GID of the
# OTHER namespace, a number its own host also has. It used to be delivered to that local QP (the
# client reported a throughput having talked to itself, and the server hung): the server must
# now receive every message.
#
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: netns_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/netns_lib.sh"
build=${1:?build dir}
netns_require_root
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-netns-$$"
ns_a="sv-a-$$" ns_b="sv-b-$$" veth_a="sva$$" veth_b="svb$$"

netns_setup "$ns_a" "$ns_b"
# Jumbo frames: perftest uses the port's 4096-byte MTU (docs/wire.md, "Path MTU").
netns_veth "$ns_a" "$veth_a" 10.77.0.1/24 "$ns_b" "$veth_b" 10.77.0.2/24 9000
ip -n "$ns_a" addr add fd00:77::1/64 dev "$veth_a" nodad
ip -n "$ns_b" addr add fd00:77::2/64 dev "$veth_b" nodad

gid_a=$(gid_index "$ns_a" ::ffff:10.77.0.1) gid_b=$(gid_index "$ns_b" ::ffff:10.77.0.2)
gid6_a=$(gid_index "$ns_a" fd00:77::1) gid6_b=$(gid_index "$ns_b" fd00:77::2)
check "each namespace's GID table lists its own addresses (a: ${gid_a:-none} ${gid6_a:-none}, b: ${gid_b:-none} ${gid6_b:-none})" \
  test -n "$gid_a" -a -n "$gid_b" -a -n "$gid6_a" -a -n "$gid6_b"

# pingpong <what> <program> <server gid> <client gid> <server address> [args]: both sides exit 0
# and print their throughput.
pingpong() {
  local what=$1 prog=$2 sgid=$3 cgid=$4 addr=$5 port server src crc
  shift 5
  port=$(free_port)
  ip netns exec "$ns_a" timeout 30 "$prog" -g "$sgid" -p "$port" "$@" >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$ns_b" timeout 30 "$prog" -g "$cgid" -p "$port" "$@" "$addr" >"$logs/client" 2>&1
  crc=$?
  wait "$server"
  src=$?
  if ! check "$what (server rc=$src, client rc=$crc)" \
    bash -c "[ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q 'iters in' '$logs/client' && grep -q 'iters in' '$logs/server'"; then
    tail -n 15 "$logs/server" | sed 's/^/  server: /'
    tail -n 15 "$logs/client" | sed 's/^/  client: /'
  fi
}
pingpong "ibv_ud_pingpong across namespaces over IPv4 GIDs" ibv_ud_pingpong "$gid_a" "$gid_b" 10.77.0.1 -n 500
# (the pingpongs exchange QP numbers and GIDs over TCP on IPv4; the datagrams use the GIDs given)
pingpong "ibv_ud_pingpong across namespaces over IPv6 GIDs" ibv_ud_pingpong "$gid6_a" "$gid6_b" 10.77.0.1 -n 500
pingpong "ibv_uc_pingpong across namespaces (4096-byte messages in 1024-byte packets)" ibv_uc_pingpong "$gid_a" \
  "$gid_b" 10.77.0.1 -n 500
pingpong "ibv_uc_pingpong over IPv6 GIDs, 65536-byte messages with events" ibv_uc_pingpong "$gid6_a" "$gid6_b" \
  10.77.0.1 -n 200 -s 65536 -e
pingpong "ibv_ud_pingpong with completion events, 1024-byte messages" ibv_ud_pingpong "$gid_a" "$gid_b" 10.77.0.1 \
  -n 500 -e -s 1024

# SOFTVERBS_PCAP records what each process sends and receives; tshark dissects it as RoCEv2.
SOFTVERBS_PCAP="$logs/ud-%p.pcap" pingpong "ibv_ud_pingpong with SOFTVERBS_PCAP" ibv_ud_pingpong "$gid_a" "$gid_b" \
  10.77.0.1 -n 20
if command -v tshark >/dev/null; then
  sends=0
  for f in "$logs"/ud-*.pcap; do
    n=$(timeout 60 tshark -n -r "$f" -Y 'infiniband.bth.opcode == 100' 2>/dev/null | wc -l)
    sends=$((sends + n))
  done
  # Each side sends and receives at least 20 UD SEND_ONLY packets (opcode 0x64): 80 records.
  check "tshark dissects the captures as UD SEND_ONLY packets ($sends records in $(ls "$logs"/ud-*.pcap | wc -l) files)" \
    test "$sends" -ge 80
  # Source ports spread QPs over 0xc000.. (as rxe's, for ECMP); the destination is always 4791.
  entropy=0
  for f in "$logs"/ud-*.pcap; do
    n=$(timeout 60 tshark -n -r "$f" -Y 'udp.srcport >= 49152 && udp.dstport == 4791' 2>/dev/null | wc -l)
    entropy=$((entropy + n))
  done
  check "the packets leave from a per-QP source port >= 0xc000 to port 4791 ($entropy records)" test "$entropy" -ge 80
fi

# SOFTVERBS_FAULTS corrupts every datagram the server receives: the ICRC check drops each one
# (as rxe and NICs do), nothing reaches the QP, and the trace names the reason.
port=$(free_port)
SOFTVERBS_FAULTS="rx:corrupt=100%,seed=1" SOFTVERBS_LOG=trace ip netns exec "$ns_a" timeout 4 ibv_ud_pingpong \
  -g "$gid_a" -p "$port" -n 5 >"$logs/server" 2>&1 &
server=$!
sleep 0.5
ip netns exec "$ns_b" timeout 3 ibv_ud_pingpong -g "$gid_b" -p "$port" -n 5 10.77.0.1 >"$logs/client" 2>&1
wait "$server"
check "a corrupted datagram is dropped by its ICRC, never delivered" \
  bash -c "grep -q 'ICRC mismatch' '$logs/server' && ! grep -q 'iters in' '$logs/server'"

pingpong "ibv_rc_pingpong across namespaces: the server receives every message (issue 11's defect)" \
  ibv_rc_pingpong "$gid_a" "$gid_b" 10.77.0.1 -n 500
pingpong "ibv_rc_pingpong over IPv6 GIDs, 65536-byte messages with events" ibv_rc_pingpong "$gid6_a" "$gid6_b" \
  10.77.0.1 -n 100 -s 65536 -e
pingpong "ibv_srq_pingpong across namespaces" ibv_srq_pingpong "$gid_a" "$gid_b" 10.77.0.1 -n 200

# On the wire itself (a capture on the veth, not softverbs' own pcap): every RoCEv2 packet's ICRC
# matches its own IP header, checked from outside with zlib (icrc_check.py) as rxe checks it. A
# message's packets leave in one UDP GSO send whose segments the kernel numbers with IPv4 IDs 0, 1,
# 2...: each ICRC must cover its segment's ID (tests/interop shows it against a real rxe). A veth
# passes a GSO send whole to the other side; with UDP segmentation off on both ends the kernel
# cuts it before the veth, as before a NIC without UDP segmentation offload, and the capture sees
# the segments a wire would carry.
if command -v tshark >/dev/null && command -v ethtool >/dev/null; then
  ip netns exec "$ns_a" ethtool -K "$veth_a" tx-udp-segmentation off
  ip netns exec "$ns_b" ethtool -K "$veth_b" tx-udp-segmentation off
  ip netns exec "$ns_a" env -u LD_PRELOAD timeout 60 tshark -n -i "$veth_a" -f 'udp dst port 4791' -c 400 -F pcap \
    -w "$logs/wire.pcap" >"$logs/tshark" 2>&1 &
  capture=$!
  # tshark takes seconds to start: traffic waits for its capture. (Never with the sanitizers'
  # runtimes preloaded, as the ASan stage does for our libraries: its capture then never starts.)
  for _ in $(seq 1 300); do grep -q 'Capturing on' "$logs/tshark" 2>/dev/null && break; sleep 0.1; done
  pingpong "ibv_rc_pingpong with a capture on the veth (4096-byte messages in 1024-byte packets)" ibv_rc_pingpong \
    "$gid_a" "$gid_b" 10.77.0.1 -n 100
  wait "$capture"
  ip netns exec "$ns_a" ethtool -K "$veth_a" tx-udp-segmentation on
  ip netns exec "$ns_b" ethtool -K "$veth_b" tx-udp-segmentation on
  icrc=$(python3 "$(dirname "$0")/icrc_check.py" "$logs/wire.pcap" 2>&1)
  read -r packets bad ids < <(sed -n 's/^packets=\([0-9]*\) bad=\([0-9]*\) nonzero_ids=\([0-9]*\)$/\1 \2 \3/p' <<<"$icrc")
  check "every RoCEv2 packet on the veth carries the ICRC of its own IP header, GSO segments' IPv4 IDs included ($icrc)" \
    test "${packets:-0}" -ge 100 -a "${bad:-1}" -eq 0 -a "${ids:-0}" -gt 0
fi

# Two RC pairs at once between the same two addresses: every response to namespace b comes from
# 10.77.0.1:4791 to 10.77.0.2:4791, and the kernel hands all of them to ONE of the two client
# processes' sockets (SO_REUSEPORT hashes the 4-tuple). The other client's ACKs reach it only
# because the receiving process forwards them through the host (docs/wire.md, "Demultiplexing");
# without that it would retry and fail.
port1=$(free_port) port2=$(free_port)
for p in "$port1" "$port2"; do
  ip netns exec "$ns_a" timeout 60 ibv_rc_pingpong -g "$gid_a" -p "$p" -n 100 >"$logs/server-$p" 2>&1 &
done
# Both servers listening before the clients connect (0.5 s was not always enough under ASan).
for _ in $(seq 1 100); do
  listening=$(ip netns exec "$ns_a" ss -Hltn "( sport = :$port1 or sport = :$port2 )" | wc -l)
  [ "$listening" -ge 2 ] && break
  sleep 0.1
done
for p in "$port1" "$port2"; do
  ip netns exec "$ns_b" timeout 60 ibv_rc_pingpong -g "$gid_b" -p "$p" -n 100 10.77.0.1 >"$logs/client-$p" 2>&1 &
done
wait
check "two ibv_rc_pingpong pairs at once between the same addresses (responses forwarded to their process)" \
  bash -c "grep -q 'iters in' '$logs/client-$port1' && grep -q 'iters in' '$logs/client-$port2' &&
           grep -q 'iters in' '$logs/server-$port1' && grep -q 'iters in' '$logs/server-$port2'" ||
  for f in server-$port1 client-$port1 server-$port2 client-$port2; do tail -n 8 "$logs/$f" | sed "s/^/  $f: /"; done

# `softverbs status` asks each live process of the namespace for its wire counters.
port=$(free_port)
ip netns exec "$ns_a" timeout 30 ib_write_bw -d softverbs0 -x "$gid_a" -p "$port" -D 3 >"$logs/server" 2>&1 &
server=$!
sleep 0.5
ip netns exec "$ns_b" timeout 30 ib_write_bw -d softverbs0 -x "$gid_b" -p "$port" -D 3 10.77.0.1 >"$logs/client" 2>&1 &
client=$!
sleep 2
ip netns exec "$ns_b" "$build/bin/softverbs" status >"$logs/status-b" 2>&1
ip netns exec "$ns_b" "$build/bin/softverbs" status --json >"$logs/status-b.json" 2>&1
ip netns exec "$ns_a" "$build/bin/softverbs" status >"$logs/status-a" 2>&1
ip netns exec "$ns_a" "$build/bin/softverbs" status --json >"$logs/status-a.json" 2>&1
wait "$server" "$client"
check "softverbs status shows the writer's device and per-QP requester counters" \
  bash -c "grep -qE 'device sent=[1-9]' '$logs/status-b' && grep -qE 'qp 0x[0-9a-f]+ requester packets=[1-9]' '$logs/status-b'"
check "softverbs status: the writer and the target busy-poll the wire once it carries their traffic" \
  bash -c "grep -qE 'device sent=.* busy_polling=1' '$logs/status-b' && grep -qE 'device sent=.* busy_polling=1' '$logs/status-a'"
check "softverbs status shows the target QP's responder counters (packets, ACKs)" \
  bash -c "grep -qE 'qp 0x[0-9a-f]+ responder packets=[1-9][0-9]* .*acks=[1-9]' '$logs/status-a'"
# The same as JSON (docs/device.md, "softverbs status"): the writer's RC QP in RTS with its
# requester counters, the target's with its responder counters, each process's device counters.
status_json() {  # status_json <file> <side> <counter> <states>: an RC QP in one of <states> (a,b) counted <counter> > 0 on <side>
  /usr/bin/python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
side, counter, states = sys.argv[2], sys.argv[3], sys.argv[4].split(",")
procs = [p for p in doc["processes"] if p["wire"] and p["wire"]["counters"]["sent"] > 0]
qps = [q for q in doc["qps"] if q["type"] == "RC" and q["state"] in states and q["counters"].get(side, {}).get(counter, 0) > 0]
sys.exit(0 if procs and qps and any(q["pid"] == p["pid"] for q in qps for p in procs) else 1)' "$@"
}
check "status --json: the writer's RC QP (RTS) with requester packets, its process's device counters" \
  status_json "$logs/status-b.json" requester packets RTS || { cat "$logs/status-b" "$logs/status-b.json"; }
# (perftest leaves a WRITE target in RTR, Ready To Receive, all a responder needs: status shows it so.)
check "status --json: the target's RC QP (RTR or RTS) with responder ACKs" \
  status_json "$logs/status-a.json" responder acks RTR,RTS ||
  { cat "$logs/status-a" "$logs/status-a.json"; }

# perftest <program> [args]: server and client exit 0 and the client prints its result row.
# REVERSE=1: the server in namespace b, the client in a.
perftest() {
  local prog=$1 port server src crc sns=$ns_a cns=$ns_b sgid=$gid_a cgid=$gid_b saddr=10.77.0.1
  shift
  [ "${REVERSE:-0}" = 1 ] && sns=$ns_b cns=$ns_a sgid=$gid_b cgid=$gid_a saddr=10.77.0.2
  port=$(free_port)
  ip netns exec "$sns" timeout 60 "$prog" -d softverbs0 -x "$sgid" -p "$port" "$@" >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$cns" timeout 60 "$prog" -d softverbs0 -x "$cgid" -p "$port" "$@" "$saddr" >"$logs/client" 2>&1
  crc=$?
  wait "$server"
  src=$?
  check "$prog $* across namespaces (server rc=$src, client rc=$crc) :: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$logs/client" | tail -1 | tr -s ' ')" \
    bash -c "[ $src -eq 0 ] && [ $crc -eq 0 ] && grep -qE '^ +[0-9]+ +[0-9]+ ' '$logs/client'"
  if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
    sed 's/^/  server: /' "$logs/server" | tail -4
    sed 's/^/  client: /' "$logs/client" | tail -4
  fi
}
perftest ib_send_bw -n 500
perftest ib_write_bw -n 500
perftest ib_read_bw -n 300
perftest ib_atomic_bw -n 300
perftest ib_send_lat -n 300
perftest ib_write_lat -n 300
perftest ib_read_lat -n 200
perftest ib_atomic_lat -n 200
perftest ib_write_bw -n 300 -c UC
perftest ib_send_bw -n 300 -c UD
perftest ib_write_bw -n 200 -q 4
perftest ib_send_bw -n 200 -b
REVERSE=1 perftest ib_read_bw -n 200 -q 2

# Tag matching from a RoCE peer (wire_tm_peer.py): a TM SRQ in namespace a matches the tags of
# SENDs arriving over the wire from namespace b (eager of one and three packets, unexpected,
# NO_TAG), byte for byte; a matched RNDV makes a's QP READ b's buffer over the wire and SEND b
# the FIN, as mlx5 hardware does; an RNDV with a bad rkey completes its tag in error.
tm_dir="$logs/tm"
mkdir -p "$tm_dir"
ip netns exec "$ns_a" timeout 30 /usr/bin/python3 "$(dirname "$0")/wire_tm_peer.py" server --dir "$tm_dir" \
  --ip 10.77.0.1 >"$tm_dir/a.log" 2>&1 &
tm_server=$!
ip netns exec "$ns_b" timeout 30 /usr/bin/python3 "$(dirname "$0")/wire_tm_peer.py" client --dir "$tm_dir" \
  --ip 10.77.0.2 >"$tm_dir/b.log" 2>&1
tm_crc=$?
wait "$tm_server"
tm_src=$?
check "tag matching over the wire: $(tail -1 "$tm_dir/a.log")" test "$tm_src" -eq 0
check "tag matching over the wire: $(tail -1 "$tm_dir/b.log")" test "$tm_crc" -eq 0

# An ordinary 1500-byte Ethernet MTU: the port reports IBV_MTU_1024 as rxe does (1500 - 80 bytes
# of headers, rounded down), so perftest, which takes the port's MTU, sends packets that fit.
ip -n "$ns_a" link set "$veth_a" mtu 1500
ip -n "$ns_b" link set "$veth_b" mtu 1500
mtu_line=$(ip netns exec "$ns_b" ibv_devinfo -d softverbs0 | grep -m1 active_mtu | tr -s ' \t' ' ')
check "on a 1500-byte link the port's active MTU is 1024 ($mtu_line)" bash -c "grep -q '1024' <<<'$mtu_line'"
perftest ib_write_bw -n 200 -s 65536
if [ "$fail" -ne 0 ]; then
  sed 's/^/  server: /' "$logs/server" | tail -5
  sed 's/^/  client: /' "$logs/client" | tail -8
fi
netns_finish
