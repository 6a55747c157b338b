#!/usr/bin/env bash
# Automatic path migration on the wire (IBA 17.2.8; issue 13 item 7): two network namespaces
# joined by two veth pairs this test creates, the first the primary path, the second the
# alternate. An RC QP armed with the alternate path writes once, then the primary link goes down
# (`ip link set ... down`): the WRITEs after it complete on the alternate path, byte-exact, and
# IBV_EVENT_PATH_MIG arrives (tests/clients/apm_peer.py).
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: netns_apm_test.sh <build dir>
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?build dir}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "skip: needs root and iproute2 to create network namespaces"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-apm-$$"
ns_a="sv-apa-$$" ns_b="sv-apb-$$"
veth_a1="svpa1$$" veth_b1="svpb1$$" veth_a2="svpa2$$" veth_b2="svpb2$$"
a1=10.81.1.1 b1=10.81.1.2 a2=10.81.2.1 b2=10.81.2.2
py=/usr/bin/python3  # the interpreter python3-pyverbs is installed for
logs=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
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
wait_file() {  # wait_file <path> <seconds>
  local i
  for i in $(seq 1 $(($2 * 100))); do [ -e "$1" ] && return 0; sleep 0.01; done
  return 1
}

ip netns add "$ns_a" && ip netns add "$ns_b" || { echo "FAIL cannot create network namespaces"; echo "0 passed, 1 failed"; exit 1; }
ip link add "$veth_a1" netns "$ns_a" type veth peer name "$veth_b1" netns "$ns_b"
ip link add "$veth_a2" netns "$ns_a" type veth peer name "$veth_b2" netns "$ns_b"
ip -n "$ns_a" addr add $a1/24 dev "$veth_a1"
ip -n "$ns_a" addr add $a2/24 dev "$veth_a2"
ip -n "$ns_b" addr add $b1/24 dev "$veth_b1"
ip -n "$ns_b" addr add $b2/24 dev "$veth_b2"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
for l in "$veth_a1" "$veth_a2"; do ip -n "$ns_a" link set "$l" up; done
for l in "$veth_b1" "$veth_b2"; do ip -n "$ns_b" link set "$l" up; done

ip netns exec "$ns_b" timeout 30 "$py" "$here/apm_peer.py" server --dir "$logs" --ip $b1 \
  >"$logs/server.out" 2>&1 &
server=$!
pids+=("$server")
ip netns exec "$ns_a" timeout 30 "$py" "$here/apm_peer.py" client --dir "$logs" --ip $a1 \
  --alt-ip $a2 --peer-alt-ip $b2 >"$logs/client.out" 2>&1 &
client=$!
pids+=("$client")
if wait_file "$logs/armed.json" 20; then
  # The primary path fails: its link is down on the client's side.
  ip -n "$ns_a" link set "$veth_a1" down
  echo '{}' >"$logs/.cut.tmp" && mv "$logs/.cut.tmp" "$logs/cut.json"
fi
wait "$client"
crc=$?
wait "$server"
src=$?
check "the client armed its alternate path and wrote on the primary" test -e "$logs/armed.json"
check "after the primary link went down the WRITEs completed on the alternate path with IBV_EVENT_PATH_MIG (rc=$crc)" \
  test "$crc" -eq 0
check "the server received every byte (rc=$src)" test "$src" -eq 0
if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
  sed 's/^/  client: /' "$logs/client.out" | tail -6
  sed 's/^/  server: /' "$logs/server.out" | tail -6
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
