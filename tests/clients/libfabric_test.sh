#!/usr/bin/env bash
# libfabric (Debian's libfabric-bin, unmodified) over softverbs0 through `softverbs run`
# (docs/ecosystem.md#libfabric): fi_info lists the verbs provider's endpoints for a RoCE device;
# fi_pingpong runs between two processes over verbs MSG (RC through the CM), verbs;ofi_rxm RDM
# and verbs DGRAM (UD), every size of its default sweep, with -c (data checked). Each run is
# bounded by a timeout; every process started here is waited for by PID.
# Usage: libfabric_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
sv="$build/bin/softverbs"
export SOFTVERBS_HOST="clients-libfabric-$$"
export XDG_RUNTIME_DIR=$(mktemp -d)  # the device view is rendered here; removed at the end
pass=0 fail=0
check() {  # check <description> <command...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}
if ! command -v fi_pingpong >/dev/null; then
  echo "libfabric: fi_pingpong not installed (tools/install_deps.sh installs libfabric-bin)"
  echo "libfabric: 0 passed, 1 failed"; exit 1
fi

info=$(timeout 60 "$sv" run -- fi_info -p verbs -v 2>&1)
check "fi_info -p verbs lists softverbs0 for MSG" grep -q "domain: softverbs0$" <<<"$(timeout 60 "$sv" run -- fi_info -p verbs -t FI_EP_MSG 2>&1)"
check "fi_info -p verbs lists softverbs0-dgram for DGRAM" grep -q "name: softverbs0-dgram" <<<"$info"
check "fi_info: the link is Ethernet" grep -q "network_type: Ethernet" <<<"$info"
check "fi_info: the link is up" grep -q "state: FI_LINK_UP" <<<"$info"
active_mtu=$(expected_active_mtu)  # the port's MTU by rxe's rule, from this namespace's interfaces
check "fi_info: MTU $active_mtu (the port's)" grep -q "mtu: $active_mtu" <<<"$info"
check "fi_info -p 'verbs;ofi_rxm' lists an RDM endpoint" \
  grep -q "type: FI_EP_RDM" <<<"$(timeout 60 "$sv" run -- fi_info -p 'verbs;ofi_rxm' 2>&1)"

# pingpong <fi_pingpong options...>: server and client must exit 0 and print the same sweep;
# -c makes both check every byte they receive.
pingpong() {
  local port=$(free_port) srv_log cli_log spid src crc
  srv_log=$(mktemp) cli_log=$(mktemp)
  timeout 120 "$sv" run -- fi_pingpong -B "$port" "$@" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  timeout 120 "$sv" run -- fi_pingpong -P "$port" "$@" 127.0.0.1 >"$cli_log" 2>&1
  crc=$?
  wait "$spid"; src=$?
  local rows
  rows=$(grep -cE '^[0-9]+[km]?\s+[0-9]+[km]?\s+=[0-9]+' "$cli_log")
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && [ "$rows" -ge "${want_rows:-1}" ]; then
    pass=$((pass + 1))
    echo "ok   fi_pingpong $* :: $rows sizes, largest: $(grep -E '^[0-9]+[km]?\s' "$cli_log" | tail -1 | tr -s ' ')"
  else
    fail=$((fail + 1))
    echo "FAIL fi_pingpong $* (server rc=$src, client rc=$crc, $rows sizes)"
    sed 's/^/  server: /' "$srv_log" | tail -5
    sed 's/^/  client: /' "$cli_log" | tail -5
  fi
  rm -f "$srv_log" "$cli_log"
}

# The default sweep ('-S all'): 64 B, 256 B, 1 KiB, 4 KiB, 64 KiB and 1 MiB for MSG and RDM; up
# to the 4096-byte MTU for DGRAM (a datagram is one packet, less the provider's prefix).
want_rows=6 pingpong -p verbs -e msg -I 100 -c
want_rows=6 pingpong -p "verbs;ofi_rxm" -e rdm -I 100 -c
want_rows=3 pingpong -p verbs -e dgram -I 100 -c
want_rows=1 pingpong -p verbs -e msg -I 2000 -S 1 -c
want_rows=1 pingpong -p "verbs;ofi_rxm" -e rdm -m tagged -I 1000 -S 4096 -c

rm -rf -- "$XDG_RUNTIME_DIR"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "libfabric: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
