#!/usr/bin/env bash
# UCX over softverbs next to UCX over shared memory, in one run: the same ucx_perftest points
# with UCX_TLS=posix,self and with UCX_TLS=rc_verbs,ud_verbs:aux on softverbs0 (through
# `softverbs run`), interleaved so load drift hits both alike; the median of --repeat passes.
# Prints a table; writes bench/results/ucx-stacks.csv. Measures only (docs/ecosystem.md).
#   bench/ucx_stacks.sh [--build DIR] [--repeat N]
set -u
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build" repeat=3
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--repeat N]" >&2; exit 2 ;;
  esac
done
sv="$build/bin/softverbs"
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install -y ucx-utils" >&2; exit 2; }
[ -x "$sv" ] || { echo "$sv missing: build softverbs first" >&2; exit 2; }
source "$here/../tests/clients/common.sh"
export SOFTVERBS_HOST="bench-ucx-$$" UCX_NET_DEVICES=softverbs0:1
out="$here/results/ucx-stacks.csv"
# test size iterations column of the Final row (3: median latency in us, 6: bandwidth in MB/s)
points=("tag_lat 8 20000 3" "ucp_put_lat 8 20000 3" "tag_bw 1048576 2000 6" "ucp_put_bw 1048576 2000 6"
        "ucp_get 1048576 2000 6")

# one <tls> <launcher...> -- <test> <size> <iters> <col>: prints the value or "fail".
one() {
  local tls=$1 port srv pid v; shift
  local launch=(); while [ "$1" != "--" ]; do launch+=("$1"); shift; done; shift
  port=$(free_port) srv=$(mktemp)
  UCX_TLS=$tls timeout 120 "${launch[@]}" ucx_perftest -p "$port" >"$srv" 2>&1 &
  pid=$!
  sleep 0.5
  v=$(UCX_TLS=$tls timeout 120 "${launch[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" \
        -w 1000 2>/dev/null | awk -v c="$4" '/^Final:/ { print $c }')
  wait "$pid"
  rm -f "$srv"
  echo "${v:-fail}"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : "fail") }'; }

declare -A shm soft
for ((r = 0; r < repeat; r++)); do
  for p in "${points[@]}"; do
    shm[$p]+="$(one posix,self env -- $p) "
    soft[$p]+="$(one rc_verbs,ud_verbs:aux "$sv" run -- $p) "
  done
done
echo "test,size,unit,ucx_posix,ucx_rc_verbs_softverbs" >"$out"
printf '%-12s %8s %6s %14s %22s\n' test size unit "UCX posix" "UCX rc_verbs/softverbs0"
for p in "${points[@]}"; do
  set -- $p
  unit=$([ "$4" = 3 ] && echo us || echo MB/s)
  a=$(tr ' ' '\n' <<<"${shm[$p]}" | grep -v '^$' | median)
  b=$(tr ' ' '\n' <<<"${soft[$p]}" | grep -v '^$' | median)
  printf '%-12s %8s %6s %14s %22s\n' "$1" "$2" "$unit" "$a" "$b"
  echo "$1,$2,$unit,$a,$b" >>"$out"
done
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "written: $out"
