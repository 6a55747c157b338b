#!/usr/bin/env bash
# The full test run (README; .ci/run calls it): a release build and an ASan+UBSan build, each
# running the unit tests, the ABI checks, the pyverbs tests and the real clients through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

stage() { echo "== $* ($(date +%T), ${SECONDS}s in) =="; }

build() {  # build <dir> [cmake args...]; warnings are errors in CI (SOFTVERBS_WERROR)
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTVERBS_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" ${targets:+--target $targets}
}
# The sanitizer builds optimise less and keep only line tables: they compile in about half the
# time, and the reports still name file and line. They are unity builds too (CMake compiles
# each batch of 8 sources as one: well under half the CPU time on 2 cores). The release build
# stays as a user builds it, one source at a time: it is the one that proves the tree builds.
sanitizer_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
                 -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)

stage release build
build build
(cd build && ctest --output-on-failure -j "$jobs" --timeout 300)

stage ASan + UBSan build
build build-asan -DSOFTVERBS_SANITIZE=ON "${sanitizer_flags[@]}"
# Python is not instrumented: the sanitizer runtimes are preloaded for processes that load our
# libraries (pyverbs, the clients). Leak checking stays on for our own test binary only.
asan_rt=$(gcc -print-file-name=libasan.so)
ubsan_rt=$(gcc -print-file-name=libubsan.so)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# handle_sigbus=0: softverbs owns SIGBUS around its copies through a peer's mapped file (a file
# truncated under a registration is an error completion, fabric/host/fault_guard.h); the
# sanitizers' own SIGBUS handlers would take the fault first.
(cd build-asan && ASAN_OPTIONS=handle_sigbus=0 ctest --output-on-failure -j "$jobs" --timeout 300 -L unit)
# The interop test (label interop, tests/interop) is left out too: its pace is the qemu guest's
# under TCG, minutes per run; the release run above runs it. So are the four longest client
# scripts (label heavy, tests/CMakeLists.txt: about 2.5 minutes of perftest, pingpongs and
# libfabric's fabtests over paths the rest already drives here), for CI's 30-minute budget.
(cd build-asan && LD_PRELOAD="$asan_rt:$ubsan_rt" ASAN_OPTIONS=detect_leaks=0:handle_sigbus=0 \
   ctest --output-on-failure -j "$jobs" --timeout 300 -L 'pyverbs|clients' -LE 'interop|heavy')
stage "ThreadSanitizer build (unit tests: the multi-threaded data path, key table, channels)"
targets=sv_unit_tests build build-tsan -DSOFTVERBS_TSAN=ON "${sanitizer_flags[@]}"  # only what the unit tests need
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:handle_sigbus=0 ctest --output-on-failure -j "$jobs" --timeout 300 -L unit)

# The unit tests' host registry (SOFTVERBS_HOST=unit-tests) reserves its space in /dev/shm.
rm -f /dev/shm/softverbs-"$(id -u)"-*-unit-tests
stage all test runs passed
