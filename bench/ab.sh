#!/usr/bin/env bash
# Two builds of softverbs compared on the 8-byte RDMA WRITE ping-pong (write_pingpong.c), runs
# interleaved so that the machine's drift (this VM's slow mode among it) hits both alike.
#   bench/ab.sh LIB_A LIB_B [pairs, default 8]
# LIB_*: a build's lib directory (build/lib, or a copy of it). Prints each build's median and
# 25th percentile over its rounds, in one-way ns, leaving out rounds above FAST ns (default 150:
# the slow mode's ~300 would only blur the comparison; how many were left out is printed).
# Each run has its own host registry (SOFTVERBS_HOST), removed when it ends.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/ab.sh LIB_A LIB_B [pairs]" >&2; exit 2; }
a=$(realpath "$1") b=$(realpath "$2") pairs=${3:-8}
exe=$(mktemp /tmp/write_pingpong.XXXXXX)
out=$(mktemp /tmp/ab.XXXXXX)
trap 'rm -f "$exe" "$out"' EXIT
gcc -O2 -o "$exe" bench/write_pingpong.c -libverbs || exit 1
for ((i = 0; i < pairs; i++)); do
  for lib in "$a" "$b"; do
    host="ab-$$-$i"
    SOFTVERBS_HOST=$host LD_LIBRARY_PATH=$lib timeout 120 "$exe" "${ITERS:-100000}" 6 | sed "s|^|$lib |" >>"$out"
    rm -f "/dev/shm/softverbs-$(id -u)-"*"-$host"
  done
done
python3 - "$out" "${FAST:-150}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if len(line.split()) == 2]
limit = float(sys.argv[2])
for lib in dict.fromkeys(r[0] for r in rows):
    v = sorted(float(r[1]) for r in rows if r[0] == lib)
    fast = [x for x in v if x < limit]
    if not fast:
        print(f"{lib}: no round under {limit:.0f} ns ({len(v)} rounds)")
        continue
    print(f"{lib}: median {statistics.median(fast):.1f} ns, p25 {fast[len(fast) // 4]:.1f} ns "
          f"({len(fast)} of {len(v)} rounds under {limit:.0f} ns)")
PY
