#!/usr/bin/env bash
# RAW_PACKET QPs across a veth pair (issue 14): Debian's perftest raw_ethernet_bw and
# raw_ethernet_lat, unmodified, server in one network namespace and client in the other, with the
# MAC/IP/port options they require, several QPs (-q 2) and several UDP flows (--flows). A
# tshark capture on the server's veth shows the frames are real Ethernet/IPv4/UDP frames with
# the addresses and ports given. raw_ethernet_burst_lat runs with the packet pacing rate limit
# and the options that perftest 4.5's code needs to finish at all (docs/raw-packet.md): without
# --burst_size its completion arrays have 0 entries, without -Q 1 its sends are unsignaled and
# it waits for their completions forever; without PP it refuses itself on Ethernet.
#
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: raw_ethernet_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/netns_lib.sh"
build=${1:?build dir}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v raw_ethernet_bw >/dev/null; then
  echo "skip: needs root, iproute2 and perftest"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-raw-$$"
ns_a="sv-ra-$$" ns_b="sv-rb-$$" veth_a="sra$$" veth_b="srb$$"
mac_a=02:5e:00:00:00:01 mac_b=02:5e:00:00:00:02
netns_setup "$ns_a" "$ns_b"
netns_veth "$ns_a" "$veth_a" 10.78.0.1/24 "$ns_b" "$veth_b" 10.78.0.2/24 "" "$mac_a" "$mac_b"

# raw <what> <program> [args]: the server (namespace a) receives from the client (namespace b);
# both exit 0 and the client prints its result row.
raw() {
  local what=$1 prog=$2 port server src crc
  shift 2
  port=$(free_port)
  ip netns exec "$ns_a" timeout 60 "$prog" -d softverbs0 -p "$port" --server -B "$mac_a" -E "$mac_b" \
    -J 10.78.0.1 -j 10.78.0.2 -K 5000 -k 6000 "$@" >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$ns_b" timeout 60 "$prog" -d softverbs0 -p "$port" --client -B "$mac_b" -E "$mac_a" \
    -J 10.78.0.1 -j 10.78.0.2 -K 5000 -k 6000 "$@" 10.78.0.1 >"$logs/client" 2>&1
  crc=$?
  wait "$server"
  src=$?
  check "$what (server rc=$src, client rc=$crc) :: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$logs/client" | tail -1 | tr -s ' ')" \
    bash -c "[ $src -eq 0 ] && [ $crc -eq 0 ] && grep -qE '^ +[0-9]+ +[0-9]+ ' '$logs/client'"
  if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
    sed 's/^/  server: /' "$logs/server" | tail -6
    sed 's/^/  client: /' "$logs/client" | tail -6
  fi
}

# The capture runs on the server's veth while the first bandwidth test sends (its first 300
# frames; the display filter picks the test's own).
ip netns exec "$ns_a" env -u LD_PRELOAD timeout 30 tshark -n -i "$veth_a" -c 300 -w "$logs/raw.pcap" >"$logs/tshark" 2>&1 &
capture=$!
for _ in $(seq 1 300); do grep -q 'Capture started\|Capturing on' "$logs/tshark" 2>/dev/null && break; sleep 0.1; done
raw "raw_ethernet_bw, one QP" raw_ethernet_bw -n 2000 -s 512
wait "$capture"
filter="eth.src == $mac_b && eth.dst == $mac_a && ip.src == 10.78.0.2 && ip.dst == 10.78.0.1"
filter="$filter && udp.srcport == 6000 && udp.dstport == 5000 && udp.length == 474 && ip.checksum.status == \"Good\""
frames=$(timeout 60 tshark -n -r "$logs/raw.pcap" -o ip.check_checksum:TRUE -Y "$filter" 2>/dev/null | wc -l)
check "tshark on the server's veth dissects the client's frames as Ethernet/IPv4/UDP, IPv4 checksum good ($frames match)" \
  test "$frames" -ge 200
raw "raw_ethernet_bw -q 2 --flows 4" raw_ethernet_bw -n 2000 -s 256 -q 2 --flows 4
raw "raw_ethernet_lat" raw_ethernet_lat -n 500 -s 128
raw "raw_ethernet_lat --tcp" raw_ethernet_lat -n 300 -s 128 --tcp
raw "raw_ethernet_burst_lat, PP rate limit" raw_ethernet_burst_lat -n 100 --rate_limit_type=PP --rate_units=M \
  --rate_limit=10 --burst_size=16 -Q 1

netns_finish
