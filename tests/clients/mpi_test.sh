#!/usr/bin/env bash
# Open MPI (Debian's openmpi-bin, its UCX PML and OSC) over softverbs0 through `softverbs run`
# (docs/ecosystem.md#open-mpi): ping-pong, all-reduce and one-sided MPI_Put / MPI_Get between 2
# and 4 ranks on this host, every result checked by the program (mpi/sv_mpi_check.c), and UCX's
# own log showing the endpoints on rc_verbs/softverbs0:1 with shared memory and TCP excluded.
# Bounded by timeouts; mpirun is waited for by PID. Usage: mpi_test.sh <build dir>
set -u
build=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
sv="$build/bin/softverbs"
export SOFTVERBS_HOST="clients-mpi-$$"
export XDG_RUNTIME_DIR=$(mktemp -d)  # the device view and the program; removed at the end
# mpirun refuses root unless told; CI runs as root in a container.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=false   # one host: never try ssh
pass=0 fail=0
if ! command -v mpicc >/dev/null || ! mpicc -o "$XDG_RUNTIME_DIR/check" "$here/mpi/sv_mpi_check.c" 2>/dev/null; then
  echo "mpi: cannot build the MPI program (tools/install_deps.sh installs openmpi-bin, libopenmpi-dev)"
  echo "mpi: 0 passed, 1 failed"; rm -rf -- "$XDG_RUNTIME_DIR"; exit 1
fi

for np in 2 4; do
  log=$(mktemp)
  # UCX may use softverbs0's transports only: the PML/OSC are UCX's and Open MPI's own shared
  # memory and TCP BTLs are off, so every byte between ranks crosses softverbs0.
  timeout 180 "$sv" run -- mpirun --oversubscribe -np "$np" \
    --mca pml ucx --mca osc ucx --mca btl self --mca coll ^hcoll \
    -x UCX_TLS=rc_verbs,ud_verbs:aux -x UCX_NET_DEVICES=softverbs0:1 -x UCX_LOG_LEVEL=info \
    "$XDG_RUNTIME_DIR/check" >"$log" 2>&1 &
  pid=$!
  wait "$pid"; rc=$?
  if [ "$rc" -eq 0 ] && grep -q "mpi checks on $np ranks: all ok" "$log"; then
    pass=$((pass + 1)); echo "ok   $np ranks:"; grep '^ok' "$log" | sed 's/^/       /'
  else
    fail=$((fail + 1)); echo "FAIL $np ranks (rc=$rc)"; tail -15 "$log" | sed 's/^/  /'
  fi
  # UCX_LOG_LEVEL=info prints each endpoint configuration: all must be rc_verbs on softverbs0.
  cfgs=$(grep -c 'ep_cfg\[[0-9]*\]:' "$log")
  others=$(grep 'ep_cfg\[[0-9]*\]:' "$log" | grep -vc 'rc_verbs/softverbs0:1')
  if [ "$cfgs" -gt 0 ] && [ "$others" -eq 0 ]; then
    pass=$((pass + 1)); echo "ok   $np ranks: UCX's $cfgs endpoint configurations all use rc_verbs/softverbs0:1"
  else
    fail=$((fail + 1)); echo "FAIL $np ranks: $cfgs endpoint configurations, $others not on rc_verbs/softverbs0:1"
    grep 'ep_cfg' "$log" | head -5 | sed 's/^/  /'
  fi
  rm -f "$log"
done

rm -rf -- "$XDG_RUNTIME_DIR"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "mpi: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
