#!/usr/bin/env bash
# Builds and runs the CPU test suite under a sanitizer:
#   scripts/sanitize.sh address|undefined|thread [BUILD_DIR]
# (BUILD_DIR defaults to build-<sanitizer>; CUDA and LibTorch off, since their libraries are not
# instrumented).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizer=${1:?usage: scripts/sanitize.sh address|undefined|thread [BUILD_DIR]}
dir=${2:-build-$sanitizer}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRAGSCOPE_SANITIZE="$sanitizer" \
  -DFRAGSCOPE_WITH_CUDA=OFF -DFRAGSCOPE_WITH_TORCH=OFF -DFRAGSCOPE_BUILD_BENCHMARKS=OFF
cmake --build "$dir" -j"$(nproc)"
# handle_segv/sigbus/sigfpe=0: the event log installs fatal-signal handlers and its tests raise
# SEGV, BUS and FPE to check that they run; ASan's own handlers would preempt them. A real
# segfault elsewhere still fails its test (it crashes), only without ASan's report.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_segv=0:handle_sigbus=0:handle_sigfpe=0
export UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" -LE gpu
