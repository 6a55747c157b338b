#!/usr/bin/env bash
# An impairment softverbs does not control (issue 11, section 3): two namespaces A and B joined
# through a third, M, that routes between them (two veth pairs). In M, softverbs-relay
# --transparent takes every UDP 4791 datagram M forwards (policy routing delivers them to it)
# and passes it on with its addresses unchanged (the ICRC covers them), dropping, duplicating
# and reordering them (--faults). No SOFTVERBS_FAULTS: softverbs does not know. ibv_rc_pingpong
# and ib_write_bw must complete through it, and the relay must have seen and impaired the
# traffic of both directions.
# Needs root (namespaces, IP_TRANSPARENT); skipped otherwise. Everything started is bounded by a
# timeout and removed by the names chosen here. Usage: netns_relay_test.sh <build dir>
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
source "$here/netns_lib.sh"
build=${1:?build dir}
netns_require_root
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-relay-$$"
ns_a="sv-ra-$$" ns_m="sv-rm-$$" ns_b="sv-rb-$$"
ip_a=10.81.1.1 ip_ma=10.81.1.2 ip_mb=10.81.2.2 ip_b=10.81.2.1

netns_setup "$ns_a" "$ns_m" "$ns_b"
netns_veth "$ns_a" "ra$$" $ip_a/24 "$ns_m" "rma$$" $ip_ma/24 9000
netns_veth "$ns_b" "rb$$" $ip_b/24 "$ns_m" "rmb$$" $ip_mb/24 9000
ip -n "$ns_a" route add default via $ip_ma
ip -n "$ns_b" route add default via $ip_mb
# M routes (the pingpongs' TCP exchange goes through it untouched) and delivers the RoCEv2
# datagrams it would forward to the relay instead (the "AnyIP" local route; rp_filter off).
ip netns exec "$ns_m" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
  net.ipv4.conf.default.rp_filter=0 "net.ipv4.conf.rma$$.rp_filter=0" "net.ipv4.conf.rmb$$.rp_filter=0"
ip -n "$ns_m" route add local 0.0.0.0/0 dev lo table 100
for dev in "rma$$" "rmb$$"; do ip -n "$ns_m" rule add pref 100 iif "$dev" ipproto udp dport 4791 lookup 100; done

faults="loss=5%,dup=5%,reorder=25%,seed=5"
ip netns exec "$ns_m" timeout 120 "$build/bin/softverbs-relay" --transparent $ip_a --listen 0.0.0.0:4791 \
  --faults "$faults" --max-seconds 100 >"$logs/relay.out" 2>"$logs/relay.err" &
relay=$!
netns_track "$relay"
for _ in $(seq 1 100); do grep -q ready "$logs/relay.out" 2>/dev/null && break; sleep 0.05; done
check "softverbs-relay --transparent is ready in the middle namespace" grep -q ready "$logs/relay.out"

gid_a=$(gid_index "$ns_a" ::ffff:$ip_a) gid_b=$(gid_index "$ns_b" ::ffff:$ip_b)

# run <what> <program> <timeout> <success pattern> [args]: server in A, client in B.
run() {
  local what=$1 prog=$2 bound=$3 pattern=$4 port server src crc gflag
  shift 4
  port=$(free_port)
  case "$prog" in ib_*) gflag=(-d softverbs0 -x) ;; *) gflag=(-g) ;; esac
  ip netns exec "$ns_a" timeout "$bound" "$prog" "${gflag[@]}" "$gid_a" -p "$port" "$@" >"$logs/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$ns_b" timeout "$bound" "$prog" "${gflag[@]}" "$gid_b" -p "$port" "$@" $ip_a >"$logs/client" 2>&1
  crc=$?
  wait "$server"
  src=$?
  # A lost ACK of a pingpong's very last message cannot be made up once its receiver, done with
  # every iteration, has exited: the sender retries into a destroyed QP (IBA 9.7.6.1.3) and ends
  # in RETRY_EXC_ERR, as with any RC peer. A pingpong side finishes only after receiving all of
  # the other's messages, so when one side counted every iteration only that ACK was missing.
  local note="" ok=0 done_log=$logs/server failed_log=$logs/client done_rc=$src
  [ "$src" -ne 0 ] && done_log=$logs/client failed_log=$logs/server done_rc=$crc
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && grep -qE "$pattern" "$logs/client"; then
    ok=1
  elif [ "$prog" = ibv_rc_pingpong ] && [ "$done_rc" -eq 0 ] && grep -q 'iters in' "$done_log" &&
       [ "$(grep -c 'Failed status' "$failed_log")" -eq 1 ] && grep -q 'transport retry counter exceeded' "$failed_log"; then
    ok=1 note=" (the last ACK was lost after the peer finished: the sender retried in vain, as any RC peer)"
  fi
  check "$what through the impairing relay (server rc=$src, client rc=$crc)$note" test "$ok" -eq 1
  if [ "$ok" -ne 1 ]; then
    sed 's/^/  server: /' "$logs/server" | tail -4
    sed 's/^/  client: /' "$logs/client" | tail -4
  fi
}
run "ibv_rc_pingpong -n 200 -s 8192" ibv_rc_pingpong 40 'iters in' -n 200 -s 8192 -m 1024
run "ib_write_bw -n 200 -s 16384" ib_write_bw 40 '^ +[0-9]+ +[0-9]+ ' -n 200 -s 16384

kill -TERM "$relay" 2>/dev/null
wait "$relay" 2>/dev/null
netns_untrack "$relay"
# "softverbs-relay tx: seen N lost N duplicated N reordered N ..." per direction.
relay_stat() { sed -n "s/^softverbs-relay $1:.* $2 \([0-9]*\).*/\1/p" "$logs/relay.err"; }
for d in tx rx; do
  seen=$(relay_stat $d seen) lost=$(relay_stat $d lost) dup=$(relay_stat $d duplicated) reo=$(relay_stat $d reordered)
  check "the relay impaired direction $d (seen ${seen:-?}, lost ${lost:-?}, duplicated ${dup:-?}, reordered ${reo:-?})" \
    bash -c "[ '${seen:-0}' -gt 100 ] && [ '${lost:-0}' -gt 0 ] && [ '${dup:-0}' -gt 0 ] && [ '${reo:-0}' -gt 0 ]"
done
netns_finish
