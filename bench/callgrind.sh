#!/usr/bin/env bash
# Instructions per work request, whatever else the machine is doing: the perftest client under
# valgrind's callgrind (counts instructions, not seconds: repeatable on a loaded machine), its
# server native. valgrind has no pidfd system calls; softverbs falls back without them
# (fabric/host/peer_process.h).
#   bench/callgrind.sh [build/lib] [perftest args...]   (default: ib_write_lat -s 8 -n 20000)
# Prints the inclusive instructions per iteration of the softverbs functions above 1 % of the
# post; the raw profile is left in bench/results/callgrind.out (not tracked) for callgrind_annotate. Every
# process started here is waited for by PID; the host registry of the run is removed at the end.
set -u
cd "$(dirname "$0")/.."
lib=$(realpath "${1:-build/lib}")
shift || true
[ $# -gt 0 ] || set -- ib_write_lat -s 8 -n 20000
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 2; }
iters=20000
for ((i = 1; i <= $#; i++)); do [ "${!i}" = -n ] && { j=$((i + 1)); iters=${!j}; }; done
export LD_LIBRARY_PATH="$lib" SOFTVERBS_HOST="callgrind-$$"
out=bench/results/callgrind.out
mkdir -p bench/results
port=$((30000 + RANDOM % 15000))
taskset -c 0 timeout 300 "$@" -d softverbs0 -x 1 -p "$port" >/dev/null 2>&1 &
server=$!
sleep 0.5
taskset -c 1 timeout 300 valgrind --tool=callgrind --callgrind-out-file="$out" "$@" -d softverbs0 -x 1 -p "$port" \
  127.0.0.1 >/dev/null 2>&1
wait "$server"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "# $* : instructions per iteration (inclusive), softverbs functions"
callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | grep -E 'libibverbs\.so\.1\]$' |
  sed -E 's/\[[^]]*\]$//; s/,//g; s/\([^)]*%\)//; s/softverbs:://g; s/build\/[a-z/]+\/(\.\.\/)+//' |
  awk -v n="$iters" '{c = $1; $1 = ""; if (c / n >= 30) printf "%7.0f %s\n", c / n, substr($0, 1, 120)}' | head -40
