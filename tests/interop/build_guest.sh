#!/usr/bin/env bash
# Builds the guest the interop tests boot under qemu (tests/interop/README.md): Debian's own
# kernel (linux-image-amd64, uncompressed to an ELF vmlinux that qemu boots through its PVH note)
# and an uncompressed initramfs holding busybox-static, the kernel's rdma_rxe and the modules it
# needs, Debian's rdma-core user space (libibverbs with the rxe provider, librdmacm), the clients
# (ibverbs-utils, perftest, rdmacm-utils) and iproute2's `rdma` and `tc`.
#
# Every file comes from an installed Debian package, and the script checks it (dpkg -S): never
# softverbs' own libraries. The result is cached in <out dir>; it is rebuilt only when this script,
# the guest's init or a package version changes.
#
# Usage: build_guest.sh <out dir>   (prints the directory holding vmlinux and initramfs.cpio)
set -euo pipefail
out=${1:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
# The host libraries, never the drop-in ones ctest puts on LD_LIBRARY_PATH (ldd follows it).
unset LD_LIBRARY_PATH LD_PRELOAD

packages="linux-image-amd64 busybox-static libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils perftest
  rdmacm-utils iproute2"
missing=""
for p in $packages; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "build_guest: missing Debian packages:$missing (tools/install_deps.sh installs them)" >&2
  exit 2
fi
# linux-image-amd64 depends on the versioned image package: linux-image-<release>.
kpkg=$(dpkg-query -W -f '${Depends}' linux-image-amd64 | tr ',' '\n' | grep -o 'linux-image-[0-9][^ ]*' | head -1)
krel=${kpkg#linux-image-}
[ -f "/boot/vmlinuz-$krel" ] && [ -d "/lib/modules/$krel" ] || { echo "build_guest: no kernel $krel" >&2; exit 2; }

key=$( { cat "$0" "$here/guest_init.sh"; dpkg-query -W $packages "$kpkg"; } | sha256sum | cut -c1-16)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$key" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
root="$out/root"
mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{dev,proc,sys,tmp,etc,run}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done  # Debian 12's merged /usr

# The kernel: vmlinuz is a bzImage around an xz stream (CONFIG_KERNEL_XZ); decompressing it here
# spares the guest a slow decompression under TCG (the kernel's scripts/extract-vmlinux does the same).
# The xz magic (its trailing NUL left out: a shell string cannot hold it), bytes not characters.
off=$(LC_ALL=C grep -abo $'\xfd7zXZ' "/boot/vmlinuz-$krel" | head -1 | cut -d: -f1)
tail -c +$((off + 1)) "/boot/vmlinuz-$krel" | xz -dc 2>/dev/null >"$out/vmlinux.tmp" || true
head -c 4 "$out/vmlinux.tmp" | grep -q 'ELF' || { echo "build_guest: cannot extract vmlinux" >&2; exit 1; }
mv "$out/vmlinux.tmp" "$out/vmlinux"

# Modules, in dependency order (modules.dep lists a module's dependencies, deepest last).
moddir="/lib/modules/$krel"
order=()
add_module() {  # add_module <path relative to moddir>
  local m=$1 dep seen
  for seen in "${order[@]}"; do [ "$seen" = "$m" ] && return 0; done
  for dep in $(sed -n "s|^$m: *||p" "$moddir/modules.dep" | tr ' ' '\n' | tac); do add_module "$dep"; done
  order+=("$m")
}
for name in virtio_pci virtio_net virtio_console crc32_generic rdma_rxe ib_uverbs rdma_ucm sch_netem; do
  rel=$(grep -o "^[^:]*/$name\.ko" "$moddir/modules.dep" | head -1)
  [ -n "$rel" ] || { echo "build_guest: module $name not in $moddir" >&2; exit 1; }
  add_module "$rel"
done
mkdir -p "$root/modules"
files=()
for m in "${order[@]}"; do
  cp "$moddir/$m" "$root/modules/"
  files+=("$moddir/$m")
  basename "$m" >>"$root/modules/order"
done

# Programs and every shared library they load (the rxe provider is dlopen()ed by libibverbs;
# libgcc_s by glibc, for the unwinding pthread_exit and pthread_cancel need: without it a threaded
# client such as rping aborts at exit with "libgcc_s.so.1 must be installed for pthread_exit").
programs="/usr/lib/x86_64-linux-gnu/libgcc_s.so.1 /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ibv_uc_pingpong
  /usr/bin/ibv_ud_pingpong /usr/bin/ibv_srq_pingpong /usr/bin/ib_send_bw /usr/bin/ib_write_bw
  /usr/bin/ib_read_bw /usr/bin/ib_atomic_bw /usr/bin/ib_send_lat /usr/bin/ib_write_lat /usr/bin/ib_read_lat
  /usr/bin/ib_atomic_lat /usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/rdma /usr/sbin/tc
  /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"
libs=$(for p in $programs; do ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'; done | sort -u)
for f in $programs $libs; do
  real=$(readlink -f "$f")
  mkdir -p "$root$(dirname "$real")"
  cp "$real" "$root$real"
  # The name the loader asks for (e.g. libibverbs.so.1 -> libibverbs.so.1.14.44.0).
  link="$(readlink -f "$(dirname "$f")")/$(basename "$f")"
  [ "$real" = "$link" ] || { mkdir -p "$root$(dirname "$link")"; ln -sf "$real" "$root$link"; }
  files+=("$f")
done
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
files+=(/etc/libibverbs.d/rxe.driver /bin/busybox)
cp /bin/busybox "$root/usr/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ -e "$root/usr/bin/$applet" ] || [ -e "$root/usr/sbin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
done
# Everything above belongs to an installed Debian package: its path, its merged-/usr twin or the
# file it links to is in dpkg's lists.
owned=$(mktemp)
cat /var/lib/dpkg/info/*.list | LC_ALL=C sort -u >"$owned"
for f in "${files[@]}"; do
  ok=""
  for c in "$f" "/usr${f#/usr}" "${f#/usr}" "$(readlink -f "$f")"; do
    if grep -qFx -- "$c" "$owned"; then ok=1; break; fi
  done
  [ -n "$ok" ] || { echo "build_guest: $f is not from an installed Debian package" >&2; rm -f "$owned"; exit 1; }
done
rm -f "$owned"

cp "$here/guest_init.sh" "$root/init"
chmod 755 "$root/init"
echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
(cd "$root" && find . | LC_ALL=C sort | /bin/busybox cpio -o -H newc 2>/dev/null) >"$out/initramfs.cpio"
rm -rf "$root"
echo "$krel" >"$out/kernel-release"
echo "$key" >"$out/stamp"
echo "$out"
