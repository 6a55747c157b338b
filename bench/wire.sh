#!/usr/bin/env bash
# softverbs on the wire next to TCP, in one run on the same two network namespaces (issue 11 §5).
#
# Two namespaces joined by a veth pair (made here, removed at the end by the names chosen here);
# in each pass, on the same link: qperf tcp_bw / tcp_lat (the peer), qperf udp_bw / udp_lat (the
# floor: what UDP alone costs on this link), then perftest over softverbs0 across the namespaces:
# ib_write_bw 1 MiB, ib_send_bw -e 1 MiB (completion events, no spinning), ib_read_bw 1 MiB,
# ib_send_lat 8 B, ib_write_bw 64 B (message rate).
# CPU per GB is the user+system time of both processes (/usr/bin/time) per GB moved.
#
# Usage: bench/wire.sh [--build DIR] [--mtu N] [--passes N] [--out DIR]
# Needs root (ip netns), perftest, qperf. Prints the table; writes <out>/wire.csv.
# Units: GB/s = 10^9 B/s (perftest's MB/sec are MiB/s and are converted); latencies are one-way,
# microseconds (perftest t_avg and t_typical; qperf's latency is an average).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build mtu=9000 passes=3 out=$here/results
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n 2,14p "$0"; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench/wire.sh: needs root (ip netns)"; exit 2; }
for c in qperf ib_write_bw /usr/bin/time; do
  command -v "$c" >/dev/null || { echo "bench/wire.sh: $c is missing (apt-get install -y qperf perftest time)"; exit 2; }
done
export LD_LIBRARY_PATH=$(cd "$build/lib" && pwd) SOFTVERBS_HOST=bench-wire-$$
ns_a=svb-a-$$ ns_b=svb-b-$$ tmp=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null
  rm -f /dev/shm/softverbs-"$(id -u)"-*-"$SOFTVERBS_HOST"; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$ns_a" && ip netns add "$ns_b" || exit 2
ip link add "va$$" netns "$ns_a" type veth peer name "vb$$" netns "$ns_b"
ip -n "$ns_a" addr add 10.79.0.1/24 dev "va$$"; ip -n "$ns_b" addr add 10.79.0.2/24 dev "vb$$"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "va$$" mtu "$mtu" up; ip -n "$ns_b" link set "vb$$" mtu "$mtu" up
gid() { ip netns exec "$1" "$build/bin/softverbs" devices | sed -n "s/^ *GID\[ *\([0-9]*\)\] ::ffff:$2\$/\1/p"; }
gid_a=$(gid "$ns_a" 10.79.0.1) gid_b=$(gid "$ns_b" 10.79.0.2)
port=$((20000 + $$ % 10000))

# qperf_run <test> <msg size>: the value qperf prints (bw in GB/s, latency in us).
qperf_run() {
  ip netns exec "$ns_a" timeout 30 qperf >/dev/null 2>&1 &
  local server=$! line
  sleep 0.3
  line=$(ip netns exec "$ns_b" timeout 20 qperf 10.79.0.1 -t 3 -m "$2" "$1" quit 2>/dev/null | grep -m1 -E '^ +(bw|recv_bw|latency) ')
  wait "$server" 2>/dev/null
  awk '{v=$3; u=$4; if (u=="GB/sec") v=v; else if (u=="MB/sec") v=v/1000; else if (u=="KB/sec") v=v/1e6;
        else if (u=="ns") v=v/1000; else if (u=="ms") v=v*1000; printf "%.4g", v}' <<<"$line"
}

# perf_run <program> <size> <iterations> <port>: runs the pair; prints perftest's result row
# followed by the CPU seconds of both sides and the bytes moved ("n/a" if the run failed).
perf_run() {
  local prog=$1 size=$2 iters=$3 port=$4 extra=${5:-} server
  ip netns exec "$ns_a" timeout 60 /usr/bin/time -f '%U %S' -o "$tmp/cpu-s" "$prog" -d softverbs0 -x "$gid_a" \
    -p "$port" -s "$size" -n "$iters" $extra >"$tmp/server" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$ns_b" timeout 60 /usr/bin/time -f '%U %S' -o "$tmp/cpu-c" "$prog" -d softverbs0 -x "$gid_b" \
    -p "$port" -s "$size" -n "$iters" $extra 10.79.0.1 >"$tmp/client" 2>&1
  wait "$server"
  local row cpu
  row=$(grep -E "^ +$size +[0-9]+ " "$tmp/client" | tail -1)
  cpu=$(cat "$tmp/cpu-s" "$tmp/cpu-c" 2>/dev/null | awk '{s+=$1+$2} END {print s+0}')
  [ -n "$row" ] || { echo "n/a"; return; }
  echo "$row $cpu $((size * iters))"
}
# field <n> <row>: the n-th field of a perf_run row; cpu_per_gb <row>.
field() { awk -v n="$1" '{print ($1=="n/a") ? "n/a" : $n}' <<<"$2"; }
cpu_per_gb() { awk '{if ($1=="n/a" || $NF==0) print "n/a"; else printf "%.3g", $(NF-1)/($NF/1e9)}' <<<"$1"; }
gbs() { awk -v v="$1" 'BEGIN{if (v=="n/a") print "n/a"; else printf "%.4g", v*1048576/1e9}'; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else print a[int((NR+1)/2)]}'; }

declare -A vals
for pass in $(seq "$passes"); do
  vals[tcp_bw]+="$(qperf_run tcp_bw 1m) "
  vals[udp_bw]+="$(qperf_run udp_bw 8k) "
  vals[tcp_lat]+="$(qperf_run tcp_lat 8) "
  vals[udp_lat]+="$(qperf_run udp_lat 8) "
  row=$(perf_run ib_write_bw 1048576 1000 $((port + 1)))
  vals[write_bw]+="$(gbs "$(field 4 "$row")") "
  vals[write_cpu]+="$(cpu_per_gb "$row") "
  # The same bytes as SENDs with completion events (-e) instead of spinning on the CQ: on two
  # cores a spinning perftest holds one of them, which the receiver then lacks (README).
  row=$(perf_run ib_send_bw 1048576 1000 $((port + 5)) -e)
  vals[send_bw_e]+="$(gbs "$(field 4 "$row")") "
  row=$(perf_run ib_read_bw 1048576 500 $((port + 2)))
  vals[read_bw]+="$(gbs "$(field 4 "$row")") "
  row=$(perf_run ib_write_bw 64 100000 $((port + 3)))
  vals[rate64]+="$(field 5 "$row") "
  row=$(perf_run ib_send_lat 8 20000 $((port + 4)))
  vals[send_lat_typ]+="$(field 5 "$row") "
  vals[send_lat_avg]+="$(field 6 "$row") "
  echo "pass $pass done" >&2
  port=$((port + 10))
done
m() { tr ' ' '\n' <<<"${vals[$1]}" | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (a+0>0 && b+0>0) printf "%.2f", a/b; else print "n/a"}'; }

mkdir -p "$out"
{
  echo "row,softverbs,peer,ratio,floor"
  echo "ib_write_bw 1MiB GB/s vs tcp_bw,$(m write_bw),$(m tcp_bw),$(ratio "$(m write_bw)" "$(m tcp_bw)"),udp_bw $(m udp_bw)"
  echo "ib_send_lat 8B avg us vs tcp_lat,$(m send_lat_avg),$(m tcp_lat),$(ratio "$(m send_lat_avg)" "$(m tcp_lat)"),udp_lat $(m udp_lat)"
  echo "ib_send_lat 8B typical us,$(m send_lat_typ),,,"
  echo "ib_send_bw -e 1MiB GB/s vs tcp_bw,$(m send_bw_e),$(m tcp_bw),$(ratio "$(m send_bw_e)" "$(m tcp_bw)"),"
  echo "ib_read_bw 1MiB GB/s,$(m read_bw),$(m tcp_bw),$(ratio "$(m read_bw)" "$(m tcp_bw)"),"
  echo "ib_write_bw 64B Mmsg/s,$(m rate64),,,"
  echo "ib_write_bw 1MiB CPU s/GB (both sides),$(m write_cpu),,,"
} >"$out/wire.csv"
echo "softverbs across two namespaces (veth, MTU $mtu), median of $passes passes, $(date -u +%F) $(uname -r)"
column -s, -t "$out/wire.csv"
