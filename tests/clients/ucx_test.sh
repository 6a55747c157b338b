#!/usr/bin/env bash
# UCX (Debian's ucx-utils, unmodified) over softverbs0, through `softverbs run` and its device view
# (docs/ecosystem.md#ucx): ucx_info sees the device and its transports; ucx_perftest runs between
# two processes over rc_verbs and over ud_verbs. Each run is bounded by a timeout; every process
# started here is waited for by PID. Usage: ucx_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
sv="$build/bin/softverbs"
export SOFTVERBS_HOST="clients-ucx-$$"
export XDG_RUNTIME_DIR=$(mktemp -d)  # the device view is rendered here; removed at the end
export UCX_NET_DEVICES=softverbs0:1
pass=0 fail=0
if ! command -v ucx_perftest >/dev/null; then
  echo "ucx: ucx_perftest not installed (tools/install_deps.sh installs ucx-utils)"
  echo "ucx: 0 passed, 1 failed"; exit 1
fi

out=$(timeout 60 "$sv" run -- ucx_info -d 2>&1)
for tl in rc_verbs ud_verbs; do
  if grep -A1 "Transport: $tl" <<<"$out" | grep -q "Device: softverbs0:1"; then
    pass=$((pass + 1)); echo "ok   ucx_info -d shows $tl on softverbs0:1"
  else
    fail=$((fail + 1)); echo "FAIL ucx_info -d does not show $tl on softverbs0:1"
  fi
done
if grep -q "Connection manager: rdmacm" <<<"$out"; then
  pass=$((pass + 1)); echo "ok   ucx_info -d shows the rdmacm connection manager"
else
  fail=$((fail + 1)); echo "FAIL ucx_info -d shows no rdmacm connection manager"
fi

# perftest <UCX_TLS> <test> <size> <iterations>: server and client must both exit 0 and the
# client must print its Final line. UCX_TLS names only softverbs0's transports (rc_verbs needs
# ud_verbs as its wire-up auxiliary, as UCX's own "rc" alias does), so the data can go no other way.
perftest() {
  local tls=$1 test=$2 size=$3 iters=$4 port srv_log cli_log spid src crc
  port=$(free_port) srv_log=$(mktemp) cli_log=$(mktemp)
  UCX_TLS=$tls timeout 120 "$sv" run -- ucx_perftest -p "$port" >"$srv_log" 2>&1 &
  spid=$!
  sleep 0.5
  UCX_TLS=$tls timeout 120 "$sv" run -- ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" \
    -n "$iters" -w 100 >"$cli_log" 2>&1
  crc=$?
  wait "$spid"; src=$?
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] && grep -q "^Final:" "$cli_log"; then
    pass=$((pass + 1))
    echo "ok   UCX_TLS=$tls $test -s $size :: $(grep '^Final:' "$cli_log" | tr -s ' ')"
  else
    fail=$((fail + 1))
    echo "FAIL UCX_TLS=$tls $test -s $size (server rc=$src, client rc=$crc)"
    grep -v '^[|+]' "$srv_log" | sed 's/^/  server: /' | tail -5
    grep -v '^[|+]' "$cli_log" | sed 's/^/  client: /' | tail -5
  fi
  rm -f "$srv_log" "$cli_log"
}

for tls in rc_verbs,ud_verbs:aux ud_verbs; do
  perftest "$tls" tag_lat 8 10000
  perftest "$tls" tag_bw 65536 1000
  perftest "$tls" ucp_put_bw 1048576 200
  perftest "$tls" ucp_get 65536 200
done
perftest rc_verbs,ud_verbs:aux tag_lat 1048576 200   # rendezvous: RDMA READ of the sender's buffer
perftest rc_verbs,ud_verbs:aux ucp_put_bw 8 10000

# UCX's rdmacm connection manager end to end: UCX's own client/server example
# (ucp_client_server.c, installed by libucx-dev), compiled here from the installed package. The
# server listens on a sockaddr (ucp_listener), the client connects to 127.0.0.1 through it; with
# UCX_SOCKADDR_TLS_PRIORITY=rdmacm the rdmacm CM is the only one UCX may use, and the client's
# debug log must say so ("... on cm rdmacm"). The example's server serves clients forever: it is
# stopped by PID once the client is done.
example=/usr/share/doc/libucx-dev/examples/ucp_client_server.c
# (The compiler runs without the sanitizer runtimes the ASan run preloads into the clients.)
if [ -f "$example" ] && LD_PRELOAD= gcc -o "$XDG_RUNTIME_DIR/ucp_client_server" "$example" -I"$(dirname "$example")" \
    -lucp -lucs 2>"$XDG_RUNTIME_DIR/cc.log"; then
  port=$(free_port) srv_log=$(mktemp) cli_log=$(mktemp)
  export UCX_TLS=rc_verbs,ud_verbs:aux UCX_SOCKADDR_TLS_PRIORITY=rdmacm
  timeout 60 "$sv" run -- stdbuf -oL "$XDG_RUNTIME_DIR/ucp_client_server" -p "$port" -c tag -i 3 >"$srv_log" 2>&1 &
  spid=$!
  for _ in $(seq 50); do grep -q "server is listening" "$srv_log" && break; sleep 0.1; done
  UCX_LOG_LEVEL=debug timeout 30 "$sv" run -- "$XDG_RUNTIME_DIR/ucp_client_server" -a 127.0.0.1 -p "$port" \
    -c tag -i 3 >"$cli_log" 2>&1
  crc=$?
  for _ in $(seq 50); do [ "$(grep -c 'UCX data message was received' "$srv_log")" -ge 2 ] && break; sleep 0.1; done
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  unset UCX_TLS UCX_SOCKADDR_TLS_PRIORITY
  # The client fails (rc != 0) on any error of an iteration; the server prints the string it
  # received: the example's test string, "ABCDEFGHIJKLMNO" (generate_test_string).
  if [ "$crc" -eq 0 ] && grep -q "Client: iteration #3" "$cli_log" && grep -q "on cm rdmacm" "$cli_log" &&
     grep -q "UCX data message was received" "$srv_log" && grep -q "^ABCDEFGHIJKLMNO\.$" "$srv_log"; then
    pass=$((pass + 1))
    echo "ok   ucp_client_server over the rdmacm CM :: $(grep -o 'client created ep .* on cm rdmacm' "$cli_log" | head -1)"
  else
    fail=$((fail + 1))
    echo "FAIL ucp_client_server over the rdmacm CM (client rc=$crc)"
    grep -v DEBUG "$srv_log" | sed 's/^/  server: /' | tail -5
    grep -E 'rdmacm|ERROR|error|Segm' "$cli_log" | sed 's/^/  client: /' | tail -8
  fi
  rm -f "$srv_log" "$cli_log"
else
  fail=$((fail + 1))
  echo "FAIL cannot build UCX's ucp_client_server example (tools/install_deps.sh installs libucx-dev)"
  sed 's/^/  gcc: /' "$XDG_RUNTIME_DIR/cc.log" 2>/dev/null | tail -3
fi

rm -rf -- "$XDG_RUNTIME_DIR"
rm -f "/dev/shm/softverbs-$(id -u)-"*"-$SOFTVERBS_HOST"
echo "ucx: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
