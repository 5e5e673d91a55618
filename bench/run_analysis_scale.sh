#!/usr/bin/env bash
# The analyzer's scale figures of bench/RESULTS.md: a synthetic 100 M-event .fslog analyzed by
# `fragscope analyze` (time and peak RSS), replay throughput, and sweep scaling with threads.
#
#   bench/run_analysis_scale.sh BUILD_DIR [EVENTS] [WORK_DIR]
#
# BUILD_DIR holds fragscope and bench/analysis_benchmark (a Release build). The log (80 bytes per
# event: 8 GB for 100 M) is written to WORK_DIR (default: a temporary directory) and removed.
set -euo pipefail
build="${1:?usage: run_analysis_scale.sh BUILD_DIR [EVENTS] [WORK_DIR]}"
events="${2:-100000000}"
work="${3:-$(mktemp -d)}"
log="${work}/synthetic-${events}.fslog"
trap 'rm -f "${log}"' EXIT

echo "== machine"
nproc
grep -m1 "model name" /proc/cpuinfo || true
echo "== write ${events} events"
/usr/bin/time -f "write: %e s wall, %M KiB max RSS" \
  "${build}/bench/analysis_benchmark" --write_synthetic_log="${log}" --events="${events}"
ls -l "${log}"
cat "${log}" > /dev/null  # page cache: measure the analyzer, not the disk
echo "== fragscope analyze --no-sweep (one core)"
/usr/bin/time -f "analyze: %e s wall, %U s user, %M KiB max RSS" \
  taskset -c 0 "${build}/fragscope" analyze "${log}" --no-sweep --no-summary > "${work}/analyze.txt"
head -20 "${work}/analyze.txt"
echo "== fragscope sweep (6 configurations) by threads"
for threads in 1 2 4 6; do
  /usr/bin/time -f "sweep --threads ${threads}: %e s wall, %M KiB max RSS" \
    "${build}/fragscope" sweep "${log}" --threads "${threads}" > "${work}/sweep-${threads}.txt"
done
cat "${work}/sweep-6.txt"
echo "== analysis_benchmark (10 M-event log)"
taskset -c 0 "${build}/bench/analysis_benchmark" --benchmark_filter='BM_Replay'
"${build}/bench/analysis_benchmark" --benchmark_filter='BM_Sweep'
