#!/usr/bin/env bash
# softverbs against the Linux kernel's Soft-RoCE (issue 12, part 2; tests/interop/README.md).
#
# A guest under qemu (TCG) runs Debian's kernel with its rdma_rxe module and Debian's rdma-core
# clients; its eth0 is a tap device in a network namespace of this test, where softverbs runs
# the same clients, unmodified. Both directions (rxe server / softverbs client and the reverse):
# ibv_rc/uc/ud/srq_pingpong over the IPv4 GID; perftest ib_send_bw, ib_write_bw (64 KiB and 1 MiB), ib_read_bw,
# ib_atomic_bw, ib_send_lat, ib_write_lat (RC), ib_write_bw -c UC; RC and UD over IPv6 GIDs;
# librdmacm's rping -v (both ways) and ucmatose, the kernel's CM against softverbs' CM agent.
# Then RC again with 2% loss each way (netem on the guest's eth0, SOFTVERBS_FAULTS on softverbs'
# sends): both peers recover.
#
# Evidence beyond the clients' exit codes: softverbs records its packets (SOFTVERBS_PCAP) and
# the guest reports rxe's counters (hw_counters in sysfs). Without loss, rxe's rcvd_pkts (what
# passed its header and ICRC checks) accounts for every packet softverbs sent but late
# retransmissions, no NAK crosses the wire, and rxe sees no sequence gap; retransmissions are
# reported, not asserted (a guest slower than the 67 ms timeout of the pingpongs draws them:
# timing, not protocol). With loss, someone retransmitted and every client still completes.
#
# Needs root (namespaces, tap) and Debian's qemu-system-x86, linux-image-amd64 and busybox-static
# (tools/install_deps.sh). Every process is bounded in time; qemu is ended by its PID, the tap and
# the namespace are removed by the names chosen here. Usage: rxe_interop_test.sh <build dir>
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/guest.sh"
build=${1:?build dir}
if [ "$(id -u)" -ne 0 ]; then
  echo "skip: needs root to create a network namespace and a tap device"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
for tool in qemu-system-x86_64 python3; do
  command -v "$tool" >/dev/null || { echo "FAIL $tool is missing (tools/install_deps.sh)"; echo "0 passed, 1 failed"; exit 1; }
done
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="interop-rxe-$$"
ns="sv-ix-$$" tap="svix$$"
host_ip=10.78.0.1 guest_ip=10.78.0.2 host_ip6=fd00:78::1 guest_ip6=fd00:78::2
work=$(mktemp -d)
cleanup() {
  guest_stop
  ip netns del "$ns" 2>/dev/null
  rm -f /dev/shm/softverbs-"$(id -u)"-*-"$SOFTVERBS_HOST"
  # INTEROP_KEEP=1 (by hand): keep the captures, logs and the guest's console.
  if [ -n "${INTEROP_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
pass=0 fail=0
check() {  # check <description> <condition...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
}

# The guest image: built from Debian's packages on first use, then cached in the build tree.
image=$(timeout 300 bash "$here/build_guest.sh" "$build/interop-guest") || {
  echo "FAIL cannot build the guest image"; fail=1; finish; }
ip netns add "$ns" && ip -n "$ns" link set lo up || { echo "FAIL cannot create a network namespace"; fail=1; finish; }
boot_start=$SECONDS
# Jumbo frames on both ends: rxe's path MTU is the netdev's minus 80 bytes, 4096 at 9000, the
# MTU softverbs' port reports (perftest uses the port's MTU; the pingpongs ask for 1024).
guest_boot "$image" "$ns" "$tap" "$guest_ip/24" "$guest_ip6/64" 9000 "$work" 400
check "the guest boots Debian's kernel $(cat "$image/kernel-release") under TCG ($((SECONDS - boot_start)) s) with rxe0 on eth0" \
  guest_run 60 "rdma link show rxe0/1 | grep -q ACTIVE"
! guest_lost || finish
ip -n "$ns" addr add "$host_ip/24" dev "$tap"
ip -n "$ns" addr add "$host_ip6/64" dev "$tap" nodad
# Session helpers in the guest's shell: wait until a TCP port listens; rxe's counters as name=value.
guest_run 60 'listening() { for _ in $(seq 200); do netstat -ltn | grep -q ":$1 " && return 0; sleep 0.1; done; return 1; }
counters() { cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . * | sed "s/:/=/"; cd /
  echo eth0_rx_dropped=$(cat /sys/class/net/eth0/statistics/rx_dropped)
  awk "/^Udp:/ { if (n++) print \"udp_in_errors=\" \$4 }" /proc/net/snmp
  d=0; while read -r _ b _; do d=$((d + 0x$b)); done </proc/net/softnet_stat; echo softnet_dropped=$d; }
cm_listening() { for _ in $(seq 200); do rdma res show cm_id | grep -q "LISTEN.*:$1 " && return 0; sleep 0.1; done; return 1; }'
# rxe's GID table in sysfs: the IPv4-mapped GID of the guest's address, e.g. ...:ffff:0a4e:0002.
ghex=$(IFS=.; set -- $guest_ip; printf '%02x%02x:%02x%02x' "$1" "$2" "$3" "$4")
ggid=$(guest_run 60 "grep -l 'ffff:$ghex\$' /sys/class/infiniband/rxe0/ports/1/gids/* | head -1" | sed 's|.*/||')
hgid=$(ip netns exec "$ns" "$build/bin/softverbs" devices | sed -n "s/^ *GID\[ *\([0-9]*\)\] ::ffff:$host_ip\$/\1/p")
# The IPv6 GIDs: rxe sends RoCE over IPv6 with a zero UDP checksum (roce-wire.md, fact 10).
ggid6=$(guest_run 60 "grep -l 'fd00:0078:0000:0000:0000:0000:0000:0002' /sys/class/infiniband/rxe0/ports/1/gids/* | head -1" | sed 's|.*/||')
hgid6=$(ip netns exec "$ns" "$build/bin/softverbs" devices | sed -n "s/^ *GID\[ *\([0-9]*\)\] $host_ip6\$/\1/p")
check "GID indices: IPv4 rxe0 ${ggid:-none}, softverbs0 ${hgid:-none}; IPv6 rxe0 ${ggid6:-none}, softverbs0 ${hgid6:-none}" \
  test -n "$ggid" -a -n "$hgid" -a -n "$ggid6" -a -n "$hgid6"

host_listening() {  # host_listening <port>: wait until a TCP socket listens on <port> in the namespace
  for _ in $(seq 100); do
    ip netns exec "$ns" ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.1
  done
  return 1
}
# run_pair <what> <g2h|h2g> <kind: pingpong|pingpong6|perftest> <program> [args]: <program> with the same
# arguments on both peers; g2h = the guest's rxe serves and softverbs connects, h2g the reverse.
# Passes when both exit 0 and print their result.
port_seq=18600
run_pair() {
  local what=$1 dir=$2 kind=$3 prog=$4 port glog="$work/guest.log" hlog="$work/host.log" grc hrc server ok
  shift 4
  # INTEROP_ONLY=<regex> (by hand, README): only the pairs whose "<program> <g2h|h2g>" matches.
  [[ "$prog $dir" =~ ${INTEROP_ONLY:-.} ]] || return 0
  port_seq=$((port_seq + 1))
  port=$port_seq
  pair_mark "$port"
  local gcmd hcmd
  if [ "$kind" = pingpong6 ]; then  # the same, over the IPv6 GIDs
    kind=pingpong
    gcmd="$prog -d rxe0 -g $ggid6 -p $port $*" hcmd="$prog -d softverbs0 -g $hgid6 -p $port $*"
  elif [ "$kind" = pingpong ]; then
    gcmd="$prog -d rxe0 -g $ggid -p $port $*" hcmd="$prog -d softverbs0 -g $hgid -p $port $*"
  else
    gcmd="$prog -d rxe0 -x $ggid -p $port -F $*" hcmd="$prog -d softverbs0 -x $hgid -p $port -F $*"
  fi
  if [ "$dir" = g2h ]; then
    guest_run 60 "timeout 90 $gcmd >/tmp/server.log 2>&1 & echo \$! >/tmp/server.pid; listening $port" >/dev/null
    ip netns exec "$ns" timeout 90 $hcmd "$guest_ip" >"$hlog" 2>&1
    hrc=$?
    # A client that failed leaves the server waiting for it: end it now, by its PID.
    [ "$hrc" -eq 0 ] || guest_run 60 'kill $(cat /tmp/server.pid)' >/dev/null
    guest_run 100 'wait $(cat /tmp/server.pid); echo "@@rc=$?"; cat /tmp/server.log' >"$glog"
  else
    ip netns exec "$ns" timeout 90 $hcmd >"$hlog" 2>&1 &
    server=$!
    host_listening "$port"
    guest_run 100 "timeout 90 $gcmd $host_ip >/tmp/client.log 2>&1; echo \"@@rc=\$?\"; cat /tmp/client.log" >"$glog"
    grep -q '^@@rc=0$' "$glog" || kill "$server" 2>/dev/null
    wait "$server"
    hrc=$?
  fi
  grc=$(sed -n 's/^@@rc=//p' "$glog")
  ok=0
  if [ "$hrc" = 0 ] && [ "${grc:-x}" = 0 ]; then
    if [ "$kind" = pingpong ]; then
      grep -q 'iters in' "$hlog" && grep -q 'iters in' "$glog" && ok=1
    else
      grep -qE '^ +[0-9]+ +[0-9]+ ' "$hlog" "$glog" && ok=1
    fi
  fi
  # With loss, RC cannot save the ACK of a pingpong's last message once its receiver, done with
  # every iteration, has exited: the sender retries into a destroyed QP (IBA 9.7.6.1.3) and ends
  # in RETRY_EXC_ERR -- or, rxe under TCG seen once, is still retrying when the run's bound ends
  # it. Every message arrived -- the peer counted all of its iterations, and a pingpong's side
  # finishes only after receiving all of the other's -- so only an ACK was missing: that ending
  # is the protocol's, not a defect.
  local note=""
  if [ "$ok" = 0 ] && [ -n "${loss_phase:-}" ] && [ "$kind" = pingpong ]; then
    local failed=$hlog finished=$glog finished_rc=$grc failed_rc=$hrc
    [ "$hrc" = 0 ] && failed=$glog finished=$hlog finished_rc=$hrc failed_rc=$grc
    local errors
    errors=$(grep -c 'Failed status' "$failed")
    if [ "$finished_rc" = 0 ] && grep -q 'iters in' "$finished" &&
       { { [ "$errors" = 1 ] && grep -q 'transport retry counter exceeded' "$failed"; } ||
         { [ "$errors" = 0 ] && { [ "$failed_rc" = 124 ] || [ "$failed_rc" = 143 ]; }; }; }; then
      ok=1 note=" (the last ACK was lost after the peer finished: the sender retried in vain, as any RC peer)"
    fi
  fi
  local result
  result=$(grep -hE 'iters in|^ +[0-9]+ +[0-9]+ ' "$hlog" | tail -1 | tr -s ' ')$note
  check "$what: $prog $* ($([ "$dir" = g2h ] && echo "rxe server, softverbs client" || echo "softverbs server, rxe client"); rxe rc=${grc:-none}, softverbs rc=$hrc) ::$result" \
    test "$ok" = 1
  if [ "$ok" != 1 ]; then
    sed 's/^/  rxe: /' "$glog" | tail -"${INTEROP_LOG_LINES:-6}"
    sed 's/^/  softverbs: /' "$hlog" | tail -"${INTEROP_LOG_LINES:-6}"
  fi
  pair_account "$port" "$what $dir"
}

# run_cm_pair <what> <g2h|h2g> <check> <server command> <client command>: an rdma_cm program pair;
# the commands hold @ADDR@ (the server's address) and @PORT@. The kernel's CM in the guest and
# softverbs' CM agent meet with IB CM MADs on QP1 (docs/cm.md, "Across hosts"). Passes when both
# exit 0 and <check> (a function given the two logs) holds.
run_cm_pair() {
  local what=$1 dir=$2 verify=$3 scmd=$4 ccmd=$5 port glog="$work/guest.log" hlog="$work/host.log" grc hrc server ok
  local prog=${scmd%% *}
  [[ "$prog $dir" =~ ${INTEROP_ONLY:-.} ]] || return 0
  port_seq=$((port_seq + 1))
  port=$port_seq
  local saddr=$host_ip
  [ "$dir" = g2h ] && saddr=$guest_ip
  pair_mark "$port"
  scmd=${scmd//@ADDR@/$saddr} ccmd=${ccmd//@ADDR@/$saddr}
  scmd=${scmd//@PORT@/$port} ccmd=${ccmd//@PORT@/$port}
  # stdout and stderr apart, stderr after: rping's unbuffered "DISCONNECT EVENT" would otherwise
  # land inside a buffered "ping data" line and break it.
  if [ "$dir" = g2h ]; then
    guest_run 60 "timeout 60 $scmd >/tmp/server.log 2>/tmp/server.err & echo \$! >/tmp/server.pid; cm_listening $port" >/dev/null
    ip netns exec "$ns" timeout 60 $ccmd >"$hlog" 2>"$hlog.err"
    hrc=$?
    [ "$hrc" -eq 0 ] || guest_run 60 'kill $(cat /tmp/server.pid)' >/dev/null
    guest_run 70 'wait $(cat /tmp/server.pid); echo "@@rc=$?"; cat /tmp/server.log /tmp/server.err' >"$glog"
  else
    ip netns exec "$ns" timeout 60 $scmd >"$hlog" 2>"$hlog.err" &
    server=$!
    host_cm_listening "$port"
    guest_run 70 "timeout 60 $ccmd >/tmp/client.log 2>/tmp/client.err; echo \"@@rc=\$?\"; cat /tmp/client.log /tmp/client.err" >"$glog"
    grep -q '^@@rc=0$' "$glog" || kill "$server" 2>/dev/null
    wait "$server"
    hrc=$?
  fi
  cat "$hlog.err" >>"$hlog"
  grc=$(sed -n 's/^@@rc=//p' "$glog")
  ok=0
  [ "$hrc" = 0 ] && [ "${grc:-x}" = 0 ] && "$verify" "$glog" "$hlog" && ok=1
  check "$what: $scmd / $ccmd ($([ "$dir" = g2h ] && echo "rxe server, softverbs client" || echo "softverbs server, rxe client"); rxe rc=${grc:-none}, softverbs rc=$hrc)" \
    test "$ok" = 1
  if [ "$ok" != 1 ]; then
    sed 's/^/  rxe: /' "$glog" | tail -"${INTEROP_LOG_LINES:-6}"
    sed 's/^/  softverbs: /' "$hlog" | tail -"${INTEROP_LOG_LINES:-6}"
  fi
  pair_account "$port" "$what $dir"
}
host_cm_listening() {  # host_cm_listening <port>: a softverbs listener's CM name (cm/service.cc) is bound
  for _ in $(seq 100); do
    ip netns exec "$ns" ss -Hxl | grep -qE "softverbs-cm-[^ ]*-$1(-[0-9]+)?( |\$)" && return 0
    sleep 0.1
  done
  return 1
}
# rping -v prints each ping's data: the client "ping data: rdma-ping-<n>: ...", the server
# "server ping data: ..."; -C 1000 of each, on both sides.
rping_verified() { [ "$(grep -c 'ping data: rdma-ping-' "$1")" = 1000 ] && [ "$(grep -c 'ping data: rdma-ping-' "$2")" = 1000 ]; }
ucmatose_passed() { grep -q 'return status 0' "$1" && grep -q 'return status 0' "$2"; }

# Every guest_run is bounded; the bounds are generous because on a machine busy with other builds
# the guest's vCPU thread can starve for tens of seconds. They are reached only when something
# hangs.
# counters <file>: rxe's counters now, one name=value a line.
counters() { guest_run 60 counters >"$1"; }
counter() { sed -n "s/^$2=//p" "$1"; }  # counter <file> <name>
delta() { echo $(($(counter "$2" "$3") - $(counter "$1" "$3"))); }  # delta <before> <after> <name>
# In the loss-free phase each pair's captures are kept apart (pcap/<port>-<pid>.pcap) and rxe's
# counters are read after it, so that a count found short below names the pairs it came from. (A
# packet still on its way when the counters are read is counted in the next pair: the sum is
# exact, a pair's share nearly.)
pair_mark() {  # pair_mark <port>: before a pair
  [ -n "${pair_accounting:-}" ] || return 0
  export SOFTVERBS_PCAP="$work/pcap/$1-%p.pcap"
}
# The host's packets dropped while their neighbour (ARP, NDP) was unresolved: the kernel's tables'
# unresolved_discards, per CPU in hexadecimal (the tables are the host's, not the namespace's:
# nothing else resolves neighbours while this test runs serially).
neighbour_discards() {
  local f n=0
  while read -r -a f; do
    [ "${f[0]}" = entries ] || n=$((n + 16#${f[11]}))
  done < <(cat /proc/net/stat/arp_cache /proc/net/stat/ndisc_cache)
  echo "$n"
}
pair_account() {  # pair_account <port> <what>: after it; a line "<sent> <rcvd_pkts> <what>"
  [ -n "${pair_accounting:-}" ] || return 0
  local files sent=0
  counters "$work/pair-after"
  files=$(ls "$work"/pcap/"$1"-*.pcap 2>/dev/null)
  [ -z "$files" ] || sent=$(python3 "$here/pcap_summary.py" "$host_ip,$host_ip6" $files | sed 's/^sent=\([0-9]*\).*/\1/')
  echo "$sent $(delta "$work/pair-before" "$work/pair-after" rcvd_pkts) $2" >>"$work/pairs"
  mv "$work/pair-after" "$work/pair-before"
}

# --- Loss-free: every transport both ways, captured ------------------------------------------
# perftest: -u 18, a local ACK timeout of 1 s instead of 67 ms: rxe under TCG takes longer than
# 67 ms to take in a window of 128 packets, and the retransmissions that follow would swamp it.
# -o 16: perftest gives the requester's max_rd_atomic the responder's own limit; rxe's is 128,
# softverbs' (like mlx5's) 16, and both refuse more than their limit (README.md).
bw="-n 50 -u 18"
mkdir -p "$work/pcap"
export SOFTVERBS_PCAP="$work/pcap/%p.pcap"
counters "$work/before"
discards_before=$(neighbour_discards)
cp "$work/before" "$work/pair-before"
pair_accounting=1
for dir in g2h h2g; do
  run_pair "RC" "$dir" pingpong ibv_rc_pingpong -n 50 -s 4096
  run_pair "UC" "$dir" pingpong ibv_uc_pingpong -n 50 -s 4096
  run_pair "UD" "$dir" pingpong ibv_ud_pingpong -n 50 -s 1024
  run_pair "SRQ" "$dir" pingpong ibv_srq_pingpong -n 20 -s 4096
  run_pair "RC over IPv6 GIDs" "$dir" pingpong6 ibv_rc_pingpong -n 20 -s 4096
  run_pair "UD over IPv6 GIDs" "$dir" pingpong6 ibv_ud_pingpong -n 20 -s 1024
  run_pair "RC SEND" "$dir" perftest ib_send_bw $bw
  run_pair "RC WRITE" "$dir" perftest ib_write_bw $bw
  # 256 packets at MTU 4096: beyond the 128-PSN window, so the requester slides within each
  # message on ACKs it asked for in the middle (rxe's requester does the same toward softverbs).
  run_pair "RC WRITE 1 MiB" "$dir" perftest ib_write_bw -s 1048576 -n 20 -u 18
  run_pair "RC SEND 1 MiB" "$dir" perftest ib_send_bw -s 1048576 -n 20 -u 18
  run_pair "RC READ" "$dir" perftest ib_read_bw $bw -o 16
  run_pair "RC atomics" "$dir" perftest ib_atomic_bw $bw -o 16
  run_pair "RC SEND latency" "$dir" perftest ib_send_lat -n 50 -u 18
  run_pair "RC WRITE latency" "$dir" perftest ib_write_lat -n 50 -u 18
  run_pair "UC WRITE" "$dir" perftest ib_write_bw -n 50 -c UC
  run_pair "UC SEND" "$dir" perftest ib_send_bw -n 50 -c UC
  run_pair "UD SEND" "$dir" perftest ib_send_bw -n 50 -c UD
  run_pair "UD SEND latency" "$dir" perftest ib_send_lat -n 50 -c UD
  # librdmacm: the kernel's CM and softverbs' CM agent (IB CM MADs on QP1).
  run_cm_pair "rdma_cm RC" "$dir" rping_verified "rping -s -a @ADDR@ -p @PORT@ -C 1000 -v" "rping -c -a @ADDR@ -p @PORT@ -C 1000 -v"
  run_cm_pair "rdma_cm RC, 2 connections" "$dir" ucmatose_passed "ucmatose -b @ADDR@ -p @PORT@ -c 2 -C 10" "ucmatose -s @ADDR@ -p @PORT@ -c 2 -C 10"
done
counters "$work/after"
discards=$(($(neighbour_discards) - discards_before))
unset SOFTVERBS_PCAP pair_accounting

# What softverbs sent and received, from its captures, next to what rxe counted.
[ -n "$(ls "$work"/pcap)" ] || { echo "FAIL no capture: no client ran"; fail=$((fail + 1)); finish; }
read -r sv_sent sv_rcvd naks_sent naks_rcvd rnr_sent rnr_rcvd retx_sent retx_rcvd final_acks < <(
  python3 "$here/pcap_summary.py" "$host_ip,$host_ip6" "$work"/pcap/*.pcap | sed 's/[a-z_]*=//g')
# Lost on the way, never refused by rxe: datagrams the tap could not hand to the guest in time
# (its queue was full), the host's discarded while the guest's address was being resolved, and
# what the guest's network stack dropped before rxe's handler (its device, softnet, UDP).
tap_drops=$(ip -n "$ns" -s -j link show "$tap" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["dropped"])')
guest_drops=0
for c in eth0_rx_dropped udp_in_errors softnet_dropped; do guest_drops=$((guest_drops + $(delta "$work/before" "$work/after" $c))); done
lost=$((tap_drops + discards + guest_drops))
rxe_rcvd=$(delta "$work/before" "$work/after" rcvd_pkts)
rxe_sent=$(delta "$work/before" "$work/after" sent_pkts)
echo "     softverbs' captures: sent $sv_sent (retransmitted $retx_sent), received $sv_rcvd (retransmitted $retx_rcvd); RNR NAKs sent $rnr_sent, received $rnr_rcvd"
echo "     rxe's counters: $(for c in rcvd_pkts sent_pkts duplicate_request out_of_seq_request rcvd_seq_err completer_retry_err send_rnr_err rcvd_rnr_err; do
  printf '%s=%s ' $c "$(delta "$work/before" "$work/after" $c)"; done)"
# rcvd_pkts counts what passed rxe's header and ICRC checks (rxe_recv.c). A packet that fails
# them is dropped silently, so every packet softverbs sent must be counted -- except a
# retransmission, which may reach a QP its process has already destroyed (a late duplicate at the
# end of a run), a run's final ACK, let out as softverbs' QP was destroyed (the same), and what
# was lost on the way.
short=$((sv_sent - rxe_rcvd))
check "rxe's header and ICRC checks accepted softverbs' packets: rcvd_pkts $rxe_rcvd of $sv_sent sent (short by $short; retransmissions $retx_sent, final ACKs $final_acks, lost on the way $lost: tap $tap_drops, unresolved neighbour $discards, the guest's stack $guest_drops)" \
  test "$sv_sent" -gt 0 -a "$short" -ge 0 -a "$short" -le $((retx_sent + final_acks + lost))
# The pairs whose counts differ, when any do (a first clue to a packet rxe refused).
[ "$short" -eq 0 ] || awk '$1 != $2 { print "     pair: softverbs sent " $1 ", rxe counted " $2 ": " substr($0, index($0, $3)) }' "$work/pairs"
check "softverbs captured no more than rxe sent: $sv_rcvd of sent_pkts $rxe_sent" \
  test "$sv_rcvd" -gt 0 -a "$sv_rcvd" -le "$rxe_sent"
check "no NAK on the wire without loss (sent $naks_sent, received $naks_rcvd)" test "$naks_sent" -eq 0 -a "$naks_rcvd" -eq 0
# The CM's MADs: softverbs' REQs answered by rxe's REPs (g2h) and rxe's REQs by softverbs' REPs
# (h2g), each followed by an RTU. Repeated MADs (the CM's retransmissions, about 6 s apart) are
# printed, not asserted: a guest starved that long draws them (timing, not protocol).
if [[ "rping g2h" =~ ${INTEROP_ONLY:-.} && "rping h2g" =~ ${INTEROP_ONLY:-.} ]]; then
  mads=$(python3 "$here/pcap_summary.py" --mads "$host_ip,$host_ip6" "$work"/pcap/*.pcap)
  check "CM MADs in softverbs' captures: $mads" \
    eval '[[ "$mads" =~ sent:.*REQ=[1-9].*REP=[1-9].*RTU=[1-9].*received:.*REQ=[1-9].*REP=[1-9].*RTU=[1-9] ]]'
fi
bad=""
for c in out_of_seq_request rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err send_err; do
  d=$(delta "$work/before" "$work/after" $c)
  [ "$d" -eq 0 ] || bad="$bad $c=$d"
done
check "rxe saw no sequence gap and no error${bad:+ (${bad# })}" test -z "$bad"

# --- A peer process killed mid-connection: its host's CM sends the DREQ ------------------------
# The kernel's CM destroys a dead process's identifiers and sends a DREQ for each established
# connection (cm.c cm_destroy_id); softverbs' guard does the same for a softverbs process
# (docs/cm.md, "A peer that dies"). rping, pinging, has its peer killed with SIGKILL; the survivor
# must get DISCONNECTED and end within seconds -- not after its RC retries run out (about 15 s
# and more under TCG), nor never.
run_death() {  # run_death <g2h: softverbs client killed | h2g: rxe client killed>
  local dir=$1 port took alive ok=0 hlog="$work/host.log" glog="$work/guest.log"
  [[ "rping-death $dir" =~ ${INTEROP_ONLY:-.} ]] || return 0
  port_seq=$((port_seq + 1))
  port=$port_seq
  if [ "$dir" = g2h ]; then
    guest_run 60 "rping -s -a $guest_ip -p $port -C 100000000 >/tmp/server.log 2>&1 & echo \$! >/tmp/server.pid; cm_listening $port" >/dev/null
    # (SOFTVERBS_LOG_FILE: the CM's and the guard's own words -- the guard's stdio is /dev/null.)
    rm -f "$work/host.svlog"
    SOFTVERBS_LOG=info SOFTVERBS_LOG_FILE="$work/host.svlog" ip netns exec "$ns" timeout 60 rping -c -a "$guest_ip" -p "$port" -C 100000000 -v >"$hlog" 2>&1 &
    local client=$!
    for _ in $(seq 300); do grep -q "ping data" "$hlog" && break; sleep 0.1; done
    alive=$(grep -c "ping data" "$hlog")
    local kids=""  # rping, the child of the timeout started above (no pkill: see clients/common.sh)
    read -r kids < "/proc/$client/task/$client/children"
    [ -n "$kids" ] && kill -KILL $kids
    wait "$client" 2>/dev/null
    # The rxe server's DISCONNECTED event, polled a second at a time (never an unbounded wait in
    # the guest). Not its end: after the event rping may wait forever for a completion that the
    # kernel's rxe never delivers (its CQ thread, seen once when the kill came between two pings).
    guest_run 60 'p=$(cat /tmp/server.pid); t=0; while ! grep -q "DISCONNECT EVENT" /tmp/server.log && kill -0 $p 2>/dev/null && [ $t -lt 30 ]; do sleep 1; t=$((t+1)); done; kill -9 $p 2>/dev/null; wait $p; echo "@@took=$t"; cat /tmp/server.log' >"$glog"
    took=$(sed -n 's/^@@took=//p' "$glog")
    [ "$alive" -gt 0 ] && grep -q "DISCONNECT EVENT" "$glog" && [ "${took:-99}" -lt 10 ] && ok=1
    check "softverbs' rping client killed after $alive pings: rxe's rping server gets DISCONNECTED (after ${took:-?} s)" \
      test "$ok" = 1
  else
    rm -f "$work/host.svlog"
    SOFTVERBS_LOG=info SOFTVERBS_LOG_FILE="$work/host.svlog" \
      ip netns exec "$ns" timeout 60 rping -s -a "$host_ip" -p "$port" -C 100000000 >"$hlog" 2>&1 &
    local server=$!
    host_cm_listening "$port"
    guest_run 60 "rping -c -a $host_ip -p $port -C 100000000 -v >/tmp/client.log 2>&1 & echo \$! >/tmp/client.pid; for i in \$(seq 150); do grep -q 'ping data' /tmp/client.log && break; sleep 0.2; done; grep -c 'ping data' /tmp/client.log; kill -9 \$(cat /tmp/client.pid); wait \$(cat /tmp/client.pid)" >"$glog"
    alive=$(grep -E '^[0-9]+$' "$glog" | head -1)
    local start=$SECONDS
    for _ in $(seq 300); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    took=$((SECONDS - start))
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    [ "${alive:-0}" -gt 0 ] && grep -q "DISCONNECT EVENT" "$hlog" && [ "$took" -lt 10 ] && ok=1
    check "rxe's rping client killed after ${alive:-0} pings: softverbs' rping server gets DISCONNECTED from the guest's CM and ends ($took s)" \
      test "$ok" = 1
  fi
  if [ "$ok" != 1 ]; then
    grep -v "ping data" "$glog" | sed 's/^/  rxe: /' | tail -8
    grep -v "ping data" "$hlog" | sed 's/^/  softverbs: /' | tail -8
    tail -n 8 "$work/host.svlog" 2>/dev/null | sed 's/^/  softverbs log: /'
  fi
}
run_death g2h
run_death h2g

# --- Two softverbs servers on one address, an rxe client each ----------------------------------
# rxe's QP1 sends every MAD from UDP port 0xD872, so the kernel here gives all of the guest's MADs
# to the same member of the address's UDP 4791 group: one of the two servers (persistent, -P: both
# stay members throughout). The other's REQ, RTU and DREQ reach it through the host (docs/cm.md,
# "Dispatch"); without that, one rxe client never connects.
if [[ "rping-two-servers" =~ ${INTEROP_ONLY:-.} ]]; then
  p1=$((port_seq + 1))
  p2=$((port_seq + 2))
  port_seq=$p2
  ip netns exec "$ns" timeout 120 rping -s -P -a "$host_ip" -p "$p1" -C 5 -v >"$work/two-1.log" 2>&1 &
  s1=$!
  ip netns exec "$ns" timeout 120 rping -s -P -a "$host_ip" -p "$p2" -C 5 -v >"$work/two-2.log" 2>&1 &
  s2=$!
  host_cm_listening "$p1"
  host_cm_listening "$p2"
  guest_run 100 "timeout 40 rping -c -a $host_ip -p $p1 -C 5 -v >/tmp/c1.log 2>&1; echo @@rc1=\$?; timeout 40 rping -c -a $host_ip -p $p2 -C 5 -v >/tmp/c2.log 2>&1; echo @@rc2=\$?; tail -3 /tmp/c1.log /tmp/c2.log" >"$work/two-guest.log"
  kill "$s1" "$s2" 2>/dev/null
  wait "$s1" "$s2" 2>/dev/null
  g1=$(sed -n 's/^@@rc1=//p' "$work/two-guest.log")
  g2=$(sed -n 's/^@@rc2=//p' "$work/two-guest.log")
  check "two softverbs rping servers on one address, an rxe rping client each: both clients connect and end 0 (rc ${g1:-?} ${g2:-?})" \
    test "${g1:-x}${g2:-x}" = 00
  if [ "${g1:-x}${g2:-x}" != 00 ]; then  # (check() does not return the result)
    sed 's/^/  rxe: /' "$work/two-guest.log" | tail -8
    tail -n 3 "$work/two-1.log" "$work/two-2.log" | sed 's/^/  softverbs: /'
  fi
fi

# --- 2% loss each way: netem on the guest's eth0, SOFTVERBS_FAULTS on softverbs' sends -----------
guest_run 60 "/usr/sbin/tc qdisc add dev eth0 root netem loss 2% && /usr/sbin/tc qdisc show dev eth0" >"$work/tc.log"
check "netem drops 2% of what the guest sends ($(head -1 "$work/tc.log"))" grep -q 'netem.*loss 2%' "$work/tc.log"
export SOFTVERBS_FAULTS="tx:loss=2%,seed=12"
loss_phase=1
mkdir -p "$work/pcap-loss"
export SOFTVERBS_PCAP="$work/pcap-loss/%p.pcap"
counters "$work/before-loss"
for dir in g2h h2g; do
  run_pair "RC with loss" "$dir" pingpong ibv_rc_pingpong -n 50 -s 4096
  run_pair "RC WRITE with loss" "$dir" perftest ib_write_bw -n 30 -u 16
  run_pair "RC READ with loss" "$dir" perftest ib_read_bw -n 30 -u 16 -o 16
done
counters "$work/after-loss"
unset SOFTVERBS_FAULTS SOFTVERBS_PCAP loss_phase
[ -n "$(ls "$work"/pcap-loss)" ] || finish  # INTEROP_ONLY chose no run with loss
read -r _ _ _ _ _ _ retx_sent retx_rcvd _ < <(
  python3 "$here/pcap_summary.py" "$host_ip,$host_ip6" "$work"/pcap-loss/*.pcap | sed 's/[a-z_]*=//g')
check "the loss was recovered from: softverbs retransmitted $retx_sent packets, rxe $retx_rcvd; rxe's counters: $(
  for c in out_of_seq_request duplicate_request rcvd_seq_err completer_retry_err; do
  printf '%s=%s ' $c "$(delta "$work/before-loss" "$work/after-loss" $c)"; done)" test $((retx_sent + retx_rcvd)) -gt 0
finish
