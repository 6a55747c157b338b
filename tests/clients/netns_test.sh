#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair that this test creates
# (issue 11). Debian's ibv_rc_pingpong, unmodified, server in one namespace and client in the
# other, each with the GID of its own namespace's address.
#
# Regression for issue 11's defect: the client's QP is connected to a QP number at a GID of the
# OTHER namespace. It must never be delivered to a QP of its own host that carries the same
# number (the client used to report a throughput, having talked to itself). Until the wire
# fabric carries RoCEv2 between hosts, nothing answers the client: its first send completes with
# "transport retry counter exceeded" and it says why in the log.
#
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: netns_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "skip: needs root and iproute2 to create network namespaces"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-netns-$$"
ns_a="sv-a-$$" ns_b="sv-b-$$" veth_a="sva$$" veth_b="svb$$"
logs=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -f /dev/shm/softverbs-"$(id -u)"-*-"$SOFTVERBS_HOST"
  rm -rf "$logs"
}
trap cleanup EXIT
pass=0 fail=0
check() {  # check <description> <condition...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}

ip netns add "$ns_a" && ip netns add "$ns_b" || { echo "FAIL cannot create network namespaces"; echo "0 passed, 1 failed"; exit 1; }
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up

# gid_index <namespace> <IPv4 address>: the GID table index of ::ffff:<address> there.
gid_index() {
  ip netns exec "$1" "$build/bin/softverbs" devices | sed -n "s/^ *GID\[ *\([0-9]*\)\] ::ffff:$2\$/\1/p"
}
gid_a=$(gid_index "$ns_a" 10.77.0.1)
gid_b=$(gid_index "$ns_b" 10.77.0.2)
check "each namespace's GID table lists its own address (a: ${gid_a:-none}, b: ${gid_b:-none})" \
  test -n "$gid_a" -a -n "$gid_b"

port=$(free_port)
SOFTVERBS_LOG=error ip netns exec "$ns_a" timeout 15 ibv_rc_pingpong -g "$gid_a" -p "$port" -n 5 >"$logs/server" 2>&1 &
server=$!
sleep 0.5
SOFTVERBS_LOG=error ip netns exec "$ns_b" timeout 15 ibv_rc_pingpong -g "$gid_b" -p "$port" -n 5 10.77.0.1 \
  >"$logs/client" 2>&1
client_rc=$?
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

check "the client does not report a throughput (it reached no peer)" bash -c "! grep -q 'iters in' '$logs/client'"
check "the client fails with retry exceeded, as a NIC whose peer never answers (rc=$client_rc)" \
  bash -c "[ $client_rc -ne 0 ] && [ $client_rc -ne 124 ] && grep -q 'transport retry counter exceeded' '$logs/client'"
check "the log says the destination is not on this host" grep -q "is not an address of this host" "$logs/client"
if [ "$fail" -ne 0 ]; then
  sed 's/^/  server: /' "$logs/server" | tail -5
  sed 's/^/  client: /' "$logs/client" | tail -8
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
