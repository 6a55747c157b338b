#!/usr/bin/env bash
# Measures UDP GSO/GRO against sendmmsg/recvmmsg for 1-4 KiB datagrams across a veth pair between
# two network namespaces it creates and deletes (root). Result: fabric/wire/README.md "GSO/GRO".
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
a=svgso-a-$$ b=svgso-b-$$
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
cc -O2 -o "$tmp/udp_gso" udp_gso.c
ip netns add "$a"; ip netns add "$b"
ip link add gsoa$$ type veth peer name gsob$$
ip link set gsoa$$ netns "$a"; ip link set gsob$$ netns "$b"
ip -n "$a" link set gsoa$$ mtu 9000 up; ip -n "$b" link set gsob$$ mtu 9000 up
ip -n "$a" addr add 10.78.0.1/30 dev gsoa$$; ip -n "$b" addr add 10.78.0.2/30 dev gsob$$
count=${COUNT:-200000}
for size in 1024 2048 4096; do
  for pair in "plain plain" "gso plain" "plain gro" "gso gro"; do
    set -- $pair
    ip netns exec "$b" timeout 60 "$tmp/udp_gso" recv 10.78.0.2 4791 "$2" "$count" "$size" > "$tmp/r" &
    until grep -q ready "$tmp/r" 2>/dev/null; do sleep 0.05; done
    s=$(ip netns exec "$a" timeout 60 "$tmp/udp_gso" send 10.78.0.2 4791 "$1" "$count" "$size")
    wait
    echo "tx=$1 rx=$2 | $s | $(tail -1 "$tmp/r")"
  done
done
