# Shared by the clients tests (sourced, not run): a TCP port for a server/client pair.
# free_port prints a random port in 20000..39999 that no socket on this host uses right now
# (checked in /proc/net/tcp and tcp6); other tests running at the same time pick their own.
free_port() {
  local used port hex
  used=" "
  for hex in $(awk 'NR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    used="$used$((16#$hex)) "
  done
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 20000))
    case "$used" in *" $port "*) continue ;; esac
    echo "$port"
    return 0
  done
  echo $((20000 + RANDOM % 20000))
}

# expected_active_mtu: the port MTU softverbs0 reports in this network namespace, in bytes, by
# rxe's rule (core::ActiveMtu): the smallest MTU among the up, non-loopback interfaces holding an
# IPv4 or global IPv6 address, less 80, rounded down to an IB MTU; 4096 if there is none.
expected_active_mtu() {
  ip -j addr show up | /usr/bin/python3 -c '
import json, sys
smallest = 4096 + 80
for link in json.load(sys.stdin):
    if "LOOPBACK" in link.get("flags", []):
        continue
    if any(a["family"] == "inet" or (a["family"] == "inet6" and a.get("scope") == "global") for a in link.get("addr_info", [])):
        smallest = min(smallest, link["mtu"])
print(next((m for m in (4096, 2048, 1024, 512) if smallest >= m + 80), 256))'
}

# kill_children <signal> <pid>: signals the children of <pid> (a `timeout` that runs the program
# under test). Bash builtins and /proc only: procps' pkill hangs under the ASan stage's
# LD_PRELOAD of the sanitizer runtimes.
kill_children() {
  local kids=""
  read -r kids < "/proc/$2/task/$2/children" 2>/dev/null
  [ -n "$kids" ] && kill "-$1" $kids 2>/dev/null
}
