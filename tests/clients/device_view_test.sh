#!/usr/bin/env bash
# The device view `softverbs run` shows a program (docs/ecosystem.md#the-device-view): checked from
# inside (files, values against libibverbs, openable device nodes), and programs inside and outside
# `softverbs run` still meet as one host. Usage: device_view_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
sv="$build/bin/softverbs"
export SOFTVERBS_HOST="clients-view-$$"
export XDG_RUNTIME_DIR=$(mktemp -d)  # the view is rendered here; removed at the end
pass=0 fail=0
check() {  # check <description> <command...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}

# A view nobody used for a day (another namespace's, say) goes when a new one is rendered.
mkdir -m 700 "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)"
mkdir "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)/stale"
touch -d '2 days ago' "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)/stale"

# Values, files and device nodes, from a process inside the view.
out=$(timeout 60 "$sv" run -- /usr/bin/python3 "$here/device_view_check.py" 2>&1); rc=$?
echo "$out" | grep -E 'FAIL|passed' | sed 's/^/  /'
check "python check inside softverbs run" test "$rc" -eq 0

check "a stale view is pruned" test ! -e "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)/stale"
# The view is what the CLI renders, and it is reused while the device does not change.
views=$(ls "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)" | wc -l)
timeout 20 "$sv" run -- true
check "a second run reuses the rendered view" test "$(ls "$XDG_RUNTIME_DIR/softverbs-view-$(id -u)" | wc -l)" -eq "$views"
guid=$(timeout 20 "$sv" sysfs-view | sed -n 's|^/sys/class/infiniband/softverbs0/node_guid: ||p')
check "sysfs-view prints the node GUID ibv_devinfo shows" \
  grep -q "node_guid:.*$guid" <<<"$(timeout 20 "$sv" run -- ibv_devinfo)"
check "cat inside the view" test "$(timeout 20 "$sv" run -- cat /sys/class/infiniband/softverbs0/node_guid)" = "$guid"
check "ls inside the view" test "$(timeout 20 "$sv" run -- ls /sys/class/infiniband_verbs/uverbs0 | tr '\n' ' ')" = "abi_version dev ibdev "

# Opting out: SOFTVERBS_VIEW=0 runs the program without the view.
check "SOFTVERBS_VIEW=0 shows no view" \
  sh -c "! SOFTVERBS_VIEW=0 timeout 20 '$sv' run -- test -e /sys/class/infiniband/softverbs0"

# One host: ibv_rc_pingpong with one side inside `softverbs run` and the other outside it (plain
# LD_LIBRARY_PATH), both ways round; RDMA between them uses process_vm_writev and pidfd_getfd.
pingpong() {  # pingpong <server launcher...> :: <client launcher...>
  local port=$(free_port) srv=() cli=() spid src crc log
  while [ "$1" != "::" ]; do srv+=("$1"); shift; done; shift; cli=("$@")
  log=$(mktemp)
  timeout 60 "${srv[@]}" ibv_rc_pingpong -g 1 -n 2000 -s 4096 -p "$port" >"$log" 2>&1 &
  spid=$!
  sleep 0.3
  timeout 60 "${cli[@]}" ibv_rc_pingpong -g 1 -n 2000 -s 4096 -p "$port" 127.0.0.1 >>"$log" 2>&1
  crc=$?
  wait "$spid"; src=$?
  [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] || { sed 's/^/  /' "$log" | tail -6; rm -f "$log"; return 1; }
  rm -f "$log"
}
check "server inside softverbs run, client outside" pingpong "$sv" run -- :: env LD_LIBRARY_PATH="$build/lib"
check "server outside, client inside softverbs run" pingpong env LD_LIBRARY_PATH="$build/lib" :: "$sv" run --

rm -rf -- "$XDG_RUNTIME_DIR"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "device view: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
