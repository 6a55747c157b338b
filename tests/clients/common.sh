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
