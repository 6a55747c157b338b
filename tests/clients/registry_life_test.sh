#!/usr/bin/env bash
# Issue 17 item 6: the host registry lists and keeps nothing of dead processes, is sized by use,
# and is removed by its last user. A storm of 20 SIGKILLed ibv_rc_pingpong servers (each holding
# a QP, an MR, a CQ), then `softverbs status`. The test owns its registry (SOFTVERBS_HOST is its
# own); every process started here is killed and waited for by PID. Usage: registry_life_test.sh <build dir>
set -u
source "$(dirname "$0")/common.sh"
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
export SOFTVERBS_HOST="clients-registry-life-$$"
sv="$build/bin/softverbs"
pass=0 fail=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
check() {  # check <description> <command...>
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $what"; else fail=$((fail + 1)); echo "FAIL $what"; fi
}
region() { ls /dev/shm/softverbs-"$(id -u)"-*-"$SOFTVERBS_HOST" 2>/dev/null; }

n=20
for _ in $(seq 1 "$n"); do
  ibv_rc_pingpong -g 1 -p "$(free_port)" >/dev/null 2>&1 &  # waits for a client that never comes
  pids+=($!)
done
# Until all of them have joined the host (bounded: 20 s).
joined=0
for _ in $(seq 1 100); do
  out=$("$sv" status 2>&1)
  joined=0
  for p in "${pids[@]}"; do grep -q "pid $p:" <<<"$(grep '^  QPs' <<<"$out")" && joined=$((joined + 1)); done
  [ "$joined" -eq "$n" ] && break
  sleep 0.2
done
check "$n servers joined the host (saw $joined)" [ "$joined" -eq "$n" ]
f=$(region)
blocks=$(stat -c '%b*%B' "$f" 2>/dev/null); blocks=$((${blocks:-0}))
size=$(stat -c %s "$f" 2>/dev/null || echo 0)
echo "     registry $f: $((blocks / 1024)) KiB allocated of $((size / 1024)) KiB"
check "the registry is sparse: $((blocks / 1024)) KiB allocated with $n processes" [ "$blocks" -gt 0 ] && [ "$blocks" -lt $((4 << 20)) ]

for p in "${pids[@]}"; do kill -9 "$p"; done
for p in "${pids[@]}"; do wait "$p"; done 2>/dev/null
killed=("${pids[@]}")
pids=()

out=$("$sv" status 2>&1)
echo "$out" | sed 's/^/     /'
listed=0
for p in "${killed[@]}"; do grep -q "pid $p[: ]" <<<"$out" && listed=$((listed + 1)); done
check "status lists none of the $n killed processes (listed $listed)" [ "$listed" -eq 0 ]
check "their process slots, QPs and keys are free" \
  sh -c "grep -q '^  processes    none' <<'X'
$out
X
grep -q '^  QPs          none' <<'X'
$out
X
grep -q '^  memory keys  none' <<'X'
$out
X"
# status was the last user: it removed the region when it exited.
check "the registry is gone once its last user has exited" [ -z "$(region)" ]

# A new user starts from a fresh region, and leaves none behind when it exits normally.
ibv_devinfo -d softverbs0 >/dev/null 2>&1
timeout 20 ibv_rc_pingpong -g 1 -p "$(free_port)" >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
check "a live user keeps the region" [ -n "$(region)" ]
kill -INT "${pids[0]}"; wait "${pids[0]}" 2>/dev/null; pids=()
"$sv" status >/dev/null 2>&1
check "and it is removed after that user is gone" [ -z "$(region)" ]

echo "registry_life: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
