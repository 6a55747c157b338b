#!/usr/bin/env bash
# Issue 15 item 6: the Debian package. Builds it from the build tree (cpack -G DEB), installs it
# (dpkg -i), runs `softverbs devices` and an ibv_rc_pingpong pair through the installed
# `softverbs run` with no softverbs variable set, checks that no file of the package lies over
# one of rdma-core's (or of any other package), removes it (dpkg -r, then -P) and checks it is gone.
# Needs root and dpkg: without them it says so and passes (skipped). A softverbs package already
# installed on the machine is left alone (skipped too). Whatever fails, the trap removes the
# package this test installed and every process it started (by PID).
# Usage: package_test.sh <build dir>
set -u
build=$(cd "${1:?build dir}" && pwd)
source "$(dirname "$0")/../clients/common.sh"
pass=0 fail=0
check() {  # check <description> <command...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}
skip() { echo "SKIP package.install: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "installing a package needs root (run as root to test it)"
command -v dpkg >/dev/null && command -v cpack >/dev/null || skip "dpkg or cpack is missing (not a Debian system)"
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong (Debian's ibverbs-utils) is missing"
if dpkg-query -W -f='${Status}' softverbs 2>/dev/null | grep -q 'ok installed'; then
  skip "a softverbs package is already installed on this machine; not replacing it"
fi

work=$(mktemp -d /tmp/softverbs-package.XXXXXX)
pids=()
installed=0
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [ "$installed" -eq 1 ] && dpkg -P softverbs >/dev/null 2>&1
  rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # (the EXIT trap then runs)
# The installed layout must work on its own: none of the build tree's variables (ctest sets
# LD_LIBRARY_PATH to the build's libraries) leaks into the installed run.
unset LD_LIBRARY_PATH SOFTVERBS_LIBDIR SOFTVERBS_BUILD_LIB
export SOFTVERBS_HOST="package-install-$$"

# rdma-core's own files, and their checksums: the package must change none of them.
rdma_files=$(dpkg -L libibverbs1 librdmacm1 ibverbs-providers 2>/dev/null | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
(cd / && echo "$rdma_files" | xargs -r sha256sum) >"$work/rdma-before" 2>/dev/null

timeout 120 cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1
deb=$(ls "$work"/out/softverbs_*.deb 2>/dev/null | head -1)
check "cpack -G DEB builds the package ($(basename "${deb:-none}"))" [ -n "$deb" ]
[ -n "$deb" ] || { tail -20 "$work/cpack.log"; exit 1; }
deps=$(dpkg-deb -f "$deb" Depends)
echo "     Depends: $deps"
check "it depends on libc6 and libstdc++6" bash -c "grep -q 'libc6' <<<'$deps' && grep -q 'libstdc++6' <<<'$deps'"
check "and on no part of rdma-core (it replaces none of it)" bash -c "! grep -qE 'libibverbs|librdmacm|ibverbs-providers' <<<'$deps'"

timeout 120 dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && installed=1
check "dpkg -i installs it" [ "$rc" -eq 0 ]
[ "$installed" -eq 1 ] || { cat "$work/dpkg-i.log"; exit 1; }

files=$(dpkg -L softverbs | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done)
echo "$files" | sed 's/^/     /'
libdir=$(dirname "$(grep '/softverbs/libibverbs.so.1$' <<<"$files" | head -1)")
check "the libraries are in a private directory ($libdir)" \
  bash -c "[ -f '$libdir/libibverbs.so.1' ] && [ -f '$libdir/librdmacm.so.1' ] && [ -f '$libdir/libmlx5.so.1' ] && [ -f '$libdir/libefa.so.1' ] && [ -f '$libdir/libsoftverbs-view.so' ] && [ -x '$libdir/softverbs-cm-guard' ] && [ \"\$(basename '$libdir')\" = softverbs ]"
check "the CLI is on PATH (/usr/bin/softverbs)" [ "$(command -v softverbs)" = /usr/bin/softverbs ]
check "the docs are in /usr/share/doc/softverbs" \
  bash -c "[ -f /usr/share/doc/softverbs/README.md ] && [ -f /usr/share/doc/softverbs/docs/install.md ]"
# No file of the package is owned by another package too, and rdma-core's are unchanged.
shared=$(echo "$files" | while read -r f; do owners=$(dpkg -S "$f" 2>/dev/null | head -1 | sed 's/: .*//'); [ "$owners" = softverbs ] || echo "$f ($owners)"; done)
check "no file of the package is another package's${shared:+: $shared}" [ -z "$shared" ]
(cd / && sha256sum -c --quiet "$work/rdma-before") >"$work/rdma-after" 2>&1
check "rdma-core's files are unchanged ($(wc -l <"$work/rdma-before") checked)" \
  bash -c "[ -s '$work/rdma-before' ] && ! [ -s '$work/rdma-after' ]"

out=$(timeout 20 softverbs devices 2>&1)
echo "$out" | sed 's/^/     /'
check "softverbs devices shows softverbs0 and the installed libraries" \
  bash -c "grep -q '^softverbs0' <<<'$out' && grep -q 'libraries: $libdir$' <<<'$out'"
out=$(timeout 20 softverbs run -- ibv_devices 2>&1)
check "softverbs run -- ibv_devices lists softverbs0" grep -q softverbs0 <<<"$out"

port=$(free_port)
timeout 30 softverbs run -- ibv_rc_pingpong -g 1 -n 1000 -p "$port" >"$work/server.log" 2>&1 &
pids+=($!)
sleep 0.5
timeout 30 softverbs run -- ibv_rc_pingpong -g 1 -n 1000 -p "$port" 127.0.0.1 >"$work/client.log" 2>&1
crc=$?
wait "${pids[0]}"; src=$?; pids=()
if ! check "ibv_rc_pingpong server and client through the installed softverbs run (rc $src, $crc)" \
  bash -c "[ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q 'iters in' '$work/client.log' && grep -q 'iters in' '$work/server.log'"; then
  sed 's/^/  server: /' "$work/server.log" | tail -5
  sed 's/^/  client: /' "$work/client.log" | tail -5
else
  echo "     $(grep 'iters in' "$work/client.log")"
fi

timeout 120 dpkg -r softverbs >"$work/dpkg-r.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && installed=0
left=$(echo "$files" | while read -r f; do [ -e "$f" ] && echo "$f"; done)
check "dpkg -r removes it and every file it installed${left:+ (left: $left)}" \
  bash -c "[ $rc -eq 0 ] && [ -z '$left' ] && ! dpkg-query -W -f='\${Status}' softverbs 2>/dev/null | grep -q 'ok installed'"
# Its postrm (CPack's ldconfig call) stays registered until a purge; after it, dpkg knows nothing of it.
timeout 120 dpkg -P softverbs >/dev/null 2>&1
check "dpkg -P leaves no record of it" bash -c "! dpkg-query -W softverbs >/dev/null 2>&1"

echo "package: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
