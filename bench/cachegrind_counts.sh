#!/usr/bin/env bash
# cachegrind_counts.sh [--quick] [BUILD_DIR]: instructions, mispredicted branches and simulated L1 data
# misses per operation of the benchmarks' workloads, counted by cachegrind (valgrind's simulator),
# as a markdown table on stdout.
#
# Timings on a shared VM move by 2x from one minute to the next; these counts are the same on
# every run, so they compare two builds of the hot path exactly (what they do not show: real
# cache and memory latency, which the timed benchmarks measure). Each figure is the difference
# between a run of 2N operations and a run of N, divided by N: start-up and warm-up cancel.
#
# BUILD_DIR (default build-bench) must hold bench/instruction_counts and
# bench/analysis_benchmark (Release; see README.md). About 40 s on a 2-core VM. --quick: a tenth of
# the operations, a smoke run for ctest (bench.cachegrind_counts_quick) whose figures still hold
# start-up effects.
set -euo pipefail

scale=10
if [[ ${1:-} == --quick ]]; then
  scale=1
  shift
fi
build=${1:-build-bench}
counts=$build/bench/instruction_counts
writer=$build/bench/analysis_benchmark
for tool in valgrind "$counts" "$writer"; do
  command -v "$tool" > /dev/null || { echo "cachegrind_counts.sh: $tool not found" >&2; exit 2; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints "instructions mispredicts d1_misses" of one run of the command.
totals() {
  valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes \
    --cachegrind-out-file="$tmp/out" "$@" 2> "$tmp/err" > /dev/null ||
    { cat "$tmp/err" >&2; exit 1; }
  awk '/I +refs:/ { gsub(",", "", $NF); i = $NF }
       /D1 +misses:/ { gsub(",", "", $4); d = $4 }
       /Mispredicts:/ { gsub(",", "", $3); m = $3 }
       END { print i, m, d }' "$tmp/err"
}

# row NAME OPS_SMALL OPS_LARGE CMD_SMALL... -- CMD_LARGE...
row() {
  local name=$1 small=$2 large=$3
  shift 3
  local first=() second=()
  while [[ $1 != -- ]]; do first+=("$1"); shift; done
  shift
  second=("$@")
  local t1 t2
  t1=$(totals "${first[@]}")
  t2=$(totals "${second[@]}")
  read -r i1 m1 d1 <<< "$t1"
  read -r i2 m2 d2 <<< "$t2"
  if [[ -z $d1 || -z $d2 ]]; then
    echo "cachegrind_counts.sh: no cachegrind summary for $name" >&2
    exit 1
  fi
  awk -v n="$name" -v ops=$((large - small)) -v i=$((i2 - i1)) -v m=$((m2 - m1)) \
    -v d=$((d2 - d1)) 'BEGIN { printf "| %s | %.0f | %.2f | %.2f |\n", n, i / ops, m / ops, d / ops }'
}

n=$((20000 * scale))
commit=$(git rev-parse --short HEAD 2> /dev/null || echo '?')
git diff --quiet HEAD 2> /dev/null || commit="$commit + uncommitted changes"
echo "cachegrind counts per operation ($commit, $(date -u +%F))"
echo
echo "| workload | instructions | mispredicted branches | L1d misses (simulated) |"
echo "|---|---:|---:|---:|"
row "warm pair 1 MiB (per pair)" $n $((2 * n)) \
  "$counts" pair 1048576 $n -- "$counts" pair 1048576 $((2 * n))
row "random mix, 1k live, sizes <= 1 MiB (per op)" $n $((2 * n)) \
  "$counts" random 1000 1 $n -- "$counts" random 1000 1 $((2 * n))
row "random mix, 100k max live (38k: the cap binds), <= 1 MiB (per op)" $n $((2 * n)) \
  "$counts" random 100000 1 $n -- "$counts" random 100000 1 $((2 * n))

# The replay: two synthetic training-like logs (analysis_benchmark's) of 2.5n and 5n events.
"$writer" --write_synthetic_log="$tmp/half.fslog" --events=$((25 * n / 10)) > /dev/null
"$writer" --write_synthetic_log="$tmp/full.fslog" --events=$((5 * n)) > /dev/null
half_events=$("$counts" replay "$tmp/half.fslog" | awk '{ print $2 }')
full_events=$("$counts" replay "$tmp/full.fslog" | awk '{ print $2 }')
row "replay of a training-like log, one core, no hooks (per event)" "$half_events" "$full_events" \
  "$counts" replay "$tmp/half.fslog" -- "$counts" replay "$tmp/full.fslog"
