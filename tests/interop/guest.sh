# Host side of the interop guest (sourced, not run; tests/interop/README.md).
#
#   guest_boot <image dir> <netns> <tap> <guest addr/prefix> <guest IPv6 addr/prefix> <mtu> <work dir> <lifetime s>
#       creates tap <tap> in <netns>, boots the guest under qemu (TCG) inside <netns> attached to
#       it, and waits until the guest's init reports ready. GUEST_PID is qemu's `timeout` wrapper.
#   guest_run <seconds> <shell command line>
#       runs the line in the guest's session shell; prints its output (stdout and stderr) and
#       returns its status; 124 when no answer came in time: the guest is then marked lost
#       (guest_lost) and every later guest_run fails at once. Busybox's shell prefers its own
#       applets to PATH: name Debian's programs that busybox also has by full path (/usr/sbin/tc).
#   guest_lost
#       succeeds once a guest_run went unanswered (or the guest never came up).
#   guest_stop
#       ends qemu by its PID (SIGTERM to its `timeout`, which passes it on), closes the FIFOs
#       and removes the tap by its name.
#
# The command channel is a virtio-serial port on a qemu `pipe` chardev: two FIFOs in <work dir>.
GUEST_PID="" GUEST_IN="" GUEST_OUT="" GUEST_NS="" GUEST_TAP="" GUEST_LOST=/dev/null/none GUEST_WORK=""

guest_boot() {
  local img=$1 ns=$2 tap=$3 addr=$4 addr6=$5 mtu=$6 work=$7 lifetime=$8 line
  GUEST_NS=$ns GUEST_TAP=$tap GUEST_LOST="$work/lost" GUEST_WORK=$work
  ip -n "$ns" tuntap add dev "$tap" mode tap || return 1
  ip -n "$ns" link set "$tap" mtu "$mtu" up || return 1
  mkfifo "$work/ctl.in" "$work/ctl.out" || return 1
  # TCG: /dev/kvm here is a paravirtual KVM that cannot boot a stock kernel. The ELF vmlinux
  # boots through its PVH entry; romfile= skips the NIC's option ROM (no firmware network boot).
  ip netns exec "$ns" timeout -s KILL "$lifetime" qemu-system-x86_64 \
    -accel tcg -m 512 -smp 1 -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$img/vmlinux" -initrd "$img/initramfs.cpio" \
    -append "console=ttyS0 loglevel=4 panic=-1 no_timer_check tsc=reliable cryptomgr.notests mitigations=off sv_addr=$addr sv_addr6=$addr6 sv_mtu=$mtu" \
    -serial "file:$work/console.log" \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:5f:00:02" \
    -chardev "pipe,id=ctl,path=$work/ctl" -device virtio-serial-pci \
    -device virtserialport,chardev=ctl,name=ctl \
    >"$work/qemu.log" 2>&1 &
  GUEST_PID=$!
  # Read-write opens of a FIFO never block, whether or not qemu has opened its end yet.
  exec {GUEST_OUT}<>"$work/ctl.out" {GUEST_IN}<>"$work/ctl.in"
  # Bounded generously: on a machine busy with other builds the vCPU thread can starve for tens
  # of seconds (the guest's watchdog then reports a soft lockup).
  while IFS= read -r -t 180 -u "$GUEST_OUT" line; do
    case $line in "@@ready"*) return 0 ;; esac
  done
  touch "$GUEST_LOST"
  echo "guest did not come up in 180 s; qemu:"; tail -5 "$work/qemu.log"; echo "console:"; tail -20 "$work/console.log"
  return 1
}

guest_run() {
  local limit=$1 line left id
  shift
  [ ! -e "$GUEST_LOST" ] || { echo "guest lost: not running '$*'"; return 124; }
  # The marker that ends this command's output (a counter would not survive $(guest_run ...)).
  id="$RANDOM$RANDOM$RANDOM"
  local deadline=$((SECONDS + limit))
  # Braces, not a subshell: a background job started here stays the session shell's, so that a
  # later command can `wait` for it.
  printf '{ %s\n} </dev/null 2>&1; echo "@@done %s $?"\n' "$*" "$id" >&"$GUEST_IN"
  while :; do
    left=$((deadline - SECONDS))
    if [ "$left" -le 0 ] || ! IFS= read -r -t "$left" -u "$GUEST_OUT" line; then
      touch "$GUEST_LOST"
      echo "guest: no answer in ${limit} s to '$*'; its console:"
      tail -15 "$GUEST_WORK/console.log" | sed 's/^/  console: /'
      return 124
    fi
    case $line in
      "@@done $id "*) return "${line##* }" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done
}

guest_lost() { [ -e "$GUEST_LOST" ]; }

guest_stop() {
  if [ -n "$GUEST_PID" ]; then
    kill "$GUEST_PID" 2>/dev/null
    wait "$GUEST_PID" 2>/dev/null
    GUEST_PID=""
  fi
  [ -z "$GUEST_IN" ] || exec {GUEST_IN}>&- {GUEST_OUT}<&-
  GUEST_IN="" GUEST_OUT=""
  [ -z "$GUEST_TAP" ] || ip -n "$GUEST_NS" link del "$GUEST_TAP" 2>/dev/null
  GUEST_TAP=""
}
