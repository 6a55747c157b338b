#!/usr/bin/env bash
# Where the time goes in the runs whose targets bench/run.sh reports as missed: perf profiles
# of the perftest client (server and client pinned to CPUs 0 and 1 as in bench/run.sh).
#   bench/profile.sh [build/lib]    -> bench/results/profile-<test>.txt
# Needs Debian's linux-perf (apt-get install -y linux-perf) and perftest. Every process started
# here is waited for by PID; the host registry of the run is removed at the end.
set -u
cd "$(dirname "$0")/.."
lib=$(realpath "${1:-build/lib}")
out=bench/results
mkdir -p "$out"
command -v perf >/dev/null || { echo "perf not found: apt-get install -y linux-perf" >&2; exit 2; }
export LD_LIBRARY_PATH="$lib" SOFTVERBS_HOST="profile-$$"

profile() {  # profile <name> <perftest args...>
  local name=$1; shift
  local port=$((30000 + RANDOM % 15000)) data
  data=$(mktemp)
  taskset -c 0 timeout 120 "$@" -d softverbs0 -x 1 -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  {
    echo "# $* (client; server on CPU 0, client on CPU 1), $(date -u +%Y-%m-%d)"
    taskset -c 1 timeout 120 perf record -F 10000 -o "$data" "$@" -d softverbs0 -x 1 -p "$port" 127.0.0.1 2>&1 |
      grep -E '^\s+[0-9]+ |#bytes'
    echo
    perf report -i "$data" --no-children --percent-limit 0.5 --stdio 2>/dev/null | grep -E '^\s+[0-9.]+%'
  } >"$out/profile-$name.txt"
  wait "$server"
  rm -f "$data"
  echo "wrote $out/profile-$name.txt"
}

profile send_lat ib_send_lat -s 8 -n 200000
profile write_lat ib_write_lat -s 8 -n 200000
profile write_bw ib_write_bw -s 1048576 -n 5000
profile read_bw ib_read_bw -s 1048576 -n 5000
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
