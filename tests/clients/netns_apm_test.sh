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
source "$here/common.sh"
source "$here/netns_lib.sh"
build=${1:?build dir}
netns_require_root
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-apm-$$"
ns_a="sv-apa-$$" ns_b="sv-apb-$$"
veth_a1="svpa1$$" veth_b1="svpb1$$" veth_a2="svpa2$$" veth_b2="svpb2$$"
a1=10.81.1.1 b1=10.81.1.2 a2=10.81.2.1 b2=10.81.2.2
py=/usr/bin/python3  # the interpreter python3-pyverbs is installed for
wait_file() {  # wait_file <path> <seconds>
  local i
  for i in $(seq 1 $(($2 * 100))); do [ -e "$1" ] && return 0; sleep 0.01; done
  return 1
}

netns_setup "$ns_a" "$ns_b"
netns_veth "$ns_a" "$veth_a1" $a1/24 "$ns_b" "$veth_b1" $b1/24
netns_veth "$ns_a" "$veth_a2" $a2/24 "$ns_b" "$veth_b2" $b2/24

ip netns exec "$ns_b" timeout 30 "$py" "$here/apm_peer.py" server --dir "$logs" --ip $b1 \
  >"$logs/server.out" 2>&1 &
server=$!
netns_track "$server"
ip netns exec "$ns_a" timeout 30 "$py" "$here/apm_peer.py" client --dir "$logs" --ip $a1 \
  --alt-ip $a2 --peer-alt-ip $b2 >"$logs/client.out" 2>&1 &
client=$!
netns_track "$client"
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
netns_finish
