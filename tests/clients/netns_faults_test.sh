#!/usr/bin/env bash
# Faults on the wire between two network namespaces joined by a veth pair this test creates
# (issue 11, section 3):
#   1. SOFTVERBS_FAULTS=loss=5%,dup=5%,reorder=25% on both sides: perftest's ib_write_bw,
#      ib_read_bw and ib_send_bw (RC) complete, and an RC stream of SENDs, WRITEs and READs
#      (wire_peer.py, pyverbs) arrives byte-exact, every WR completing once, in order.
#   2. A peer SIGKILLed: the survivor's SENDs complete with IBV_WC_RETRY_EXC_ERR (then flushes)
#      after the retries its timeout and retry_cnt imply, never a hang.
#   3. A flood of malformed datagrams (roce_flood.py) at a namespace whose RC and UD QPs are
#      receiving: nothing crashes, no byte outside (or, for refused packets, inside) an MR
#      changes, and the live QPs complete a real exchange afterwards.
# Needs root for `ip netns` (CI runs as root); skipped otherwise. Everything started is bounded
# by a timeout and removed by the names chosen here. Usage: netns_faults_test.sh <build dir>
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
source "$here/netns_lib.sh"
build=${1:?build dir}
netns_require_root
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-faults-$$"
ns_a="sv-fa-$$" ns_b="sv-fb-$$" veth_a="svfa$$" veth_b="svfb$$"
ip_a=10.79.0.1 ip_b=10.79.0.2
py=/usr/bin/python3  # the interpreter python3-pyverbs is installed for
signal() { echo '{}' >"$1.tmp" && mv "$1.tmp" "$1"; }  # signal <file>: a rendezvous file, whole
show() { sed "s/^/  $2: /" "$1" | tail -"${3:-6}"; }

netns_setup "$ns_a" "$ns_b"
netns_veth "$ns_a" "$veth_a" $ip_a/24 "$ns_b" "$veth_b" $ip_b/24 9000
gid_a=$(gid_index "$ns_a" ::ffff:$ip_a) gid_b=$(gid_index "$ns_b" ::ffff:$ip_b)
check "each namespace's GID table lists its address (a: ${gid_a:-none}, b: ${gid_b:-none})" test -n "$gid_a" -a -n "$gid_b"

# --- 1. loss, duplication and reordering on both sides -----------------------------------------
faults="loss=5%,dup=5%,reorder=25%"
perftest() {  # perftest <seed> <program> [args]: server and client exit 0, the client prints its row
  local seed=$1 prog=$2 port server src crc
  shift 2
  port=$(free_port)
  SOFTVERBS_FAULTS="$faults,seed=$seed" ip netns exec "$ns_a" timeout 60 "$prog" -d softverbs0 -x "$gid_a" \
    -p "$port" "$@" >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  SOFTVERBS_FAULTS="$faults,seed=$((seed + 1))" ip netns exec "$ns_b" timeout 60 "$prog" -d softverbs0 -x "$gid_b" \
    -p "$port" "$@" $ip_a >"$logs/client" 2>&1
  crc=$?
  wait "$server"
  src=$?
  check "$prog $* with $faults on both sides (server rc=$src, client rc=$crc)" \
    bash -c "[ $src -eq 0 ] && [ $crc -eq 0 ] && grep -qE '^ +[0-9]+ +[0-9]+ ' '$logs/client'"
  if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
    grep -hE 'Fail|rror' "$logs/server" | sed 's/^/  server: /' | head -4
    grep -hE 'Fail|rror' "$logs/client" | sed 's/^/  client: /' | head -4
  fi
}
perftest 11 ib_write_bw -n 100 -s 16384
perftest 13 ib_read_bw -n 50 -s 16384
perftest 15 ib_send_bw -n 100 -s 16384

# peers <mode> <role a> <role b> <bound> [args]: wire_peer.py in each namespace; both must pass.
peers() {
  local mode=$1 ra=$2 rb=$3 bound=$4 dir pa rca rcb
  shift 4
  dir="$logs/$mode-$ra"
  mkdir -p "$dir"
  ip netns exec "$ns_a" env ${faults_a:+SOFTVERBS_FAULTS=$faults_a} timeout "$bound" $py "$here/wire_peer.py" \
    "$mode" "$ra" --dir "$dir" --ip $ip_a "$@" >"$dir/a.log" 2>&1 &
  pa=$!
  ip netns exec "$ns_b" env ${faults_b:+SOFTVERBS_FAULTS=$faults_b} timeout "$bound" $py "$here/wire_peer.py" \
    "$mode" "$rb" --dir "$dir" --ip $ip_b "$@" >"$dir/b.log" 2>&1
  rcb=$?
  wait "$pa"
  rca=$?
  check "$mode: $ra (rc=$rca) :: $(tail -1 "$dir/a.log")" test "$rca" -eq 0
  check "$mode: $rb (rc=$rcb) :: $(tail -1 "$dir/b.log")" test "$rcb" -eq 0
}
faults_a="$faults,seed=21" faults_b="$faults,seed=22"
peers stream server client 70 --count 100 --timeout 14 --deadline 60
faults_a="" faults_b=""

# --- 2. a peer SIGKILLed ----------------------------------------------------------------------
# The survivor's SENDs time out: timeout 14 (67 ms) and retry_cnt 3 imply about 0.27 s; the
# bound (30 s) is a hang guard only.
dir="$logs/kill"
mkdir -p "$dir"
ip netns exec "$ns_a" timeout 40 $py "$here/wire_peer.py" kill victim --dir "$dir" --ip $ip_a --deadline 30 \
  >"$dir/a.log" 2>&1 &
victim=$!
netns_track "$victim"
ip netns exec "$ns_b" timeout 40 $py "$here/wire_peer.py" kill survivor --dir "$dir" --ip $ip_b --deadline 30 \
  --timeout 14 --retry-cnt 3 >"$dir/b.log" 2>&1 &
survivor=$!
netns_track "$survivor"
for _ in $(seq 1 300); do [ -e "$dir/victim-received.json" ] && break; sleep 0.1; done
vpid=$($py -c "import json; print(json.load(open('$dir/victim-ready.json'))['pid'])" 2>/dev/null)
if [ -n "$vpid" ] && [ -e "$dir/victim-received.json" ]; then
  kill -9 "$vpid"
  wait "$victim" 2>/dev/null
  signal "$dir/killed.json"
fi
wait "$survivor"
rc=$?
check "kill: the survivor of a SIGKILLed peer (rc=$rc) :: $(tail -1 "$dir/b.log")" test "$rc" -eq 0
[ "$rc" -eq 0 ] || show "$dir/a.log" victim

# --- 3. a flood of malformed datagrams --------------------------------------------------------
dir="$logs/target-target"
mkdir -p "$dir"
ip netns exec "$ns_a" timeout 60 $py "$here/wire_peer.py" target target --dir "$dir" --ip $ip_a --deadline 50 \
  >"$dir/a.log" 2>&1 &
pa=$!
netns_track "$pa"
ip netns exec "$ns_b" timeout 60 $py "$here/wire_peer.py" target partner --dir "$dir" --ip $ip_b --deadline 50 \
  >"$dir/b.log" 2>&1 &
pb=$!
netns_track "$pb"
for _ in $(seq 1 300); do [ -e "$dir/target-ready.json" ] && break; sleep 0.1; done
ip netns exec "$ns_b" timeout 60 $py "$here/roce_flood.py" --src $ip_b --dst $ip_a --target "$dir/target.json" \
  >"$dir/flood.log" 2>&1
frc=$?
sleep 0.5  # the last datagrams are processed before the target looks
signal "$dir/flooded.json"
wait "$pa"
rca=$?
wait "$pb"
rcb=$?
check "flood: roce_flood.py (rc=$frc) :: $(tail -1 "$dir/flood.log")" test "$frc" -eq 0
check "flood: the target survives, nothing written outside or by refused packets (rc=$rca) :: $(tail -1 "$dir/a.log")" \
  test "$rca" -eq 0
check "flood: the partner's exchange after the flood (rc=$rcb) :: $(tail -1 "$dir/b.log")" test "$rcb" -eq 0

netns_finish
