#!/usr/bin/env bash
# Debian's ibv_devices and ibv_devinfo -v, unmodified, over softverbs0 (issue 2: the device).
# Usage: devinfo_test.sh <build dir>
set -u
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-devinfo-$$"
pass=0 fail=0
check() {  # check <description> <command...>: counts a pass or a fail
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}
out=$(timeout 20 ibv_devices 2>&1); rc=$?
check "ibv_devices exits 0" test $rc -eq 0
check "ibv_devices lists softverbs0" grep -qE '^\s+softverbs0\s+0253' <<<"$out"

out=$(timeout 20 ibv_devinfo -v 2>&1); rc=$?
check "ibv_devinfo -v exits 0" test $rc -eq 0
active_mtu=$(expected_active_mtu)  # by rxe's rule, from this namespace's interfaces
for pattern in 'hca_id:\s+softverbs0' 'transport:\s+InfiniBand' 'vendor_id:\s+0x5356' \
    'phys_port_cnt:\s+1' 'max_qp:\s+65536' 'max_qp_wr:\s+32768' 'max_sge:\s+32' \
    'max_cqe:\s+1048575' 'max_qp_rd_atom:\s+16' 'atomic_cap:\s+ATOMIC_HCA' 'max_pkeys:\s+1' \
    'state:\s+PORT_ACTIVE \(4\)' 'max_mtu:\s+4096' "active_mtu:\\s+$active_mtu" 'link_layer:\s+Ethernet' \
    'gid_tbl_len:\s+64' 'GID\[\s+0\]:\s+fe80::253:56' 'GID\[\s+1\]:\s+::ffff:127\.0\.0\.1, RoCE v2'; do
  check "ibv_devinfo -v shows /$pattern/" grep -qE "$pattern" <<<"$out"
done
out=$(timeout 20 ibv_devinfo -d softverbs0 -i 2 2>&1); rc=$?
check "ibv_devinfo refuses port 2" test $rc -ne 0
out=$(timeout 20 ibv_devinfo -d nosuchdev 2>&1); rc=$?
check "ibv_devinfo refuses an unknown device" test $rc -ne 0
# The same through the CLI, which must find the libraries by itself.
out=$(env -u LD_LIBRARY_PATH timeout 20 "$build/bin/softverbs" run -- ibv_devices 2>&1); rc=$?
check "softverbs run -- ibv_devices" grep -q softverbs0 <<<"$out"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "devinfo: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
