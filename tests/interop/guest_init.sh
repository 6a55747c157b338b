#!/bin/sh
# PID 1 of the interop guest (tests/interop/README.md). Loads the modules, gives eth0 the address
# and MTU the kernel command line names (sv_addr=, sv_mtu=), creates the kernel's Soft-RoCE
# device on it (`rdma link add rxe0 type rxe netdev eth0`), then serves the host: one shell reads
# command lines from the virtio-serial port and writes their output back to it.
export PATH=/usr/bin:/usr/sbin HOME=/ TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p"; }
for m in $(cat /modules/order); do
  insmod "/modules/$m" || echo "init: insmod $m failed" >/dev/console
done
ip link set lo up
ip link set eth0 mtu "$(arg sv_mtu)" up
ip addr add "$(arg sv_addr)" dev eth0
# No duplicate address detection: the address (and rxe's GID for it) is usable at once.
echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad
ip -6 addr add "$(arg sv_addr6)" dev eth0
rdma link add rxe0 type rxe netdev eth0 || echo "init: rdma link add failed" >/dev/console

port=""
for _ in $(seq 100); do
  port=$(ls /dev/vport*p1 2>/dev/null | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "init: no virtio-serial port" >/dev/console; poweroff -f; }
# One shell for the whole session, so that a server started in the background by one command can
# be waited for by a later one. A virtio-serial port opens once at a time: one read-write open
# serves as the shell's input and output. PID 1 must not exit: the loop restarts the shell.
while :; do
  sh -c 'echo "@@ready $(uname -r)"; exec sh' <>"$port" >&0 2>&0
  sleep 1
done
