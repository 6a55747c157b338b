# Shared by the tests that make their own hosts (sourced after common.sh, not run): network
# namespaces joined by veth pairs, removed again by the names this test chose, and the checks'
# tally. A test sets SOFTVERBS_HOST before calling netns_setup.
#
#   netns_require_root            exits 0 with a skip line unless root with iproute2
#   netns_setup <ns>...           creates the namespaces (lo up) and a logs dir; cleanup on EXIT
#   netns_veth <ns_a> <if_a> <addr_a/len> <ns_b> <if_b> <addr_b/len> [mtu] [mac_a mac_b]
#                                 a veth pair between two of them, addressed and up
#   netns_track <pid>             a process the cleanup kills (by PID) if it still runs
#   netns_untrack <pid>           no longer (it was waited for: its PID may be reused)
#   check <description> <cmd...>  counts and prints one result; returns the command's status
#   gid_index <ns> <gid>          the GID table index of <gid> in softverbs0 there
#   netns_finish                  prints the tally; its status is the test's

netns_require_root() {
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
    echo "skip: needs root and iproute2 to create network namespaces"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
  fi
}

netns_names=()
netns_pids=()
pass=0 fail=0

netns_cleanup() {
  local p ns
  for p in "${netns_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for ns in "${netns_names[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -f /dev/shm/softverbs-"$(id -u)"-*-"${SOFTVERBS_HOST:?}"
  [ -n "${logs:-}" ] && rm -rf "$logs"
}

netns_setup() {
  local ns
  logs=$(mktemp -d)
  trap netns_cleanup EXIT
  for ns in "$@"; do
    if ! ip netns add "$ns"; then
      echo "FAIL cannot create network namespaces"
      echo "0 passed, 1 failed"
      exit 1
    fi
    netns_names+=("$ns")
    ip -n "$ns" link set lo up
  done
}

netns_veth() {
  local ns_a=$1 if_a=$2 addr_a=$3 ns_b=$4 if_b=$5 addr_b=$6 mtu=${7:-} mac_a=${8:-} mac_b=${9:-}
  ip link add "$if_a" netns "$ns_a" ${mac_a:+address "$mac_a"} type veth peer name "$if_b" netns "$ns_b" \
    ${mac_b:+address "$mac_b"}
  # nodad: an IPv6 address is usable at once (no duplicate address detection delay).
  ip -n "$ns_a" addr add "$addr_a" dev "$if_a" nodad 2>/dev/null || ip -n "$ns_a" addr add "$addr_a" dev "$if_a"
  ip -n "$ns_b" addr add "$addr_b" dev "$if_b" nodad 2>/dev/null || ip -n "$ns_b" addr add "$addr_b" dev "$if_b"
  ip -n "$ns_a" link set "$if_a" ${mtu:+mtu "$mtu"} up
  ip -n "$ns_b" link set "$if_b" ${mtu:+mtu "$mtu"} up
}

netns_track() { netns_pids+=("$1"); }
netns_untrack() {  # once waited for: its PID may be reused
  local p kept=()
  for p in "${netns_pids[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  netns_pids=("${kept[@]}")
}

check() {
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; return 1; fi
}

gid_index() {
  ip netns exec "$1" "$build/bin/softverbs" devices | sed -n "s/^ *GID\[ *\([0-9]*\)\] $2\$/\1/p"
}

netns_finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
