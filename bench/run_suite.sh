#!/usr/bin/env bash
# The whole benchmark suite in one command: builds a Release build and writes one
# markdown file with a section per subject, each stating the machine, the date, the git commit
# and the exact commands, followed by tables made from the benchmarks' JSON (suite_tables.py).
#
#   bench/run_suite.sh [--quick] [--no-build] [--gpu-only] [BUILD_DIR] [OUT_MD]
#
#   BUILD_DIR   default build-bench (configured Release, tests off, if it has no CMakeCache.txt)
#   OUT_MD      default bench/results/suite-<host>-<date>[-quick].md (never bench/RESULTS.md:
#               figures are merged there by hand, with their machine)
#   --quick     a smoke run: tiny timings, small logs, no analysis_benchmark (about a minute)
#   --no-build  use BUILD_DIR as it is (e.g. a prebuilt pack, see bench/README.md)
#   --gpu-only  only the GPU section (on a GPU machine without Google Benchmark)
#
# Sections: hot path (1 and 4 threads, warm and random), logging overhead, replay throughput
# and sweep scaling, fragmentation on fixed traces (peak reserved / peak allocated for each
# policy and threshold), and the GPU comparison when nvidia-smi finds a GPU. The full run takes
# 6-9 minutes on a 2-core VM (plus the first build). Exit status: the number of commands
# that failed (their output tail is in the file).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

quick=0 build_it=1 gpu_only=0 positional=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-build) build_it=0 ;;
    --gpu-only) gpu_only=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
    -*) echo "run_suite.sh: unknown flag $arg" >&2 && exit 2 ;;
    *) positional+=("$arg") ;;
  esac
done
build=${positional[0]:-build-bench}
suffix=""
[ "$quick" = 1 ] && suffix="-quick"
out=${positional[1]:-bench/results/suite-$(hostname -s)-$(date -u +%Y-%m-%d)${suffix}.md}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
body="$work/body.md"
: > "$body"
failures=0
suite_start=$(date +%s)

if [ "$quick" = 1 ]; then
  min_time=0.01 reps=1 events=1000000
  hot_filter='BM_WarmPair|BM_RandomAllocations/1000/1$|BM_ConcurrentStreams'
  threads_filter='BM_ConcurrentRandom/1000/'
  log_filter='Burst|Clock|Rdtsc|Crc32c'
  gpu_flags=(--min-time 0.02 --repetitions 3 --random-steps 5000 --random-repetitions 1)
else
  min_time=0.5 reps=3 events=10000000
  hot_filter='BM_WarmPair|BM_RandomAllocations/[0-9]+/(1|64)$|BM_ConcurrentStreams'
  threads_filter='.'
  log_filter='.'
  gpu_flags=()
fi
gbench_flags=(--benchmark_min_time="$min_time" --benchmark_repetitions="$reps"
              --benchmark_report_aggregates_only=true --benchmark_out_format=json)

# --- The machine, once; repeated in every section ---
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
[ -z "$cpu" ] && cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)
hypervisor=$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor: *//p' | head -1)
mem_gib=$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
machine="${cpu:-unknown CPU}, $(nproc) cores, ${mem_gib} GiB${hypervisor:+, $hypervisor VM}, $(hostname -s)"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit + uncommitted changes to $(git status --porcelain --untracked-files=no | wc -l) files"
fi

emit() { printf '%s\n' "$@" >> "$body"; }

section() {
  emit "" "## $1" "" "- machine: $machine" "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)" \
    "- commit: $commit; build: \`$build\` ($build_type)" ""
}

# run LOG CMD...: records the exact command, runs it with its output in LOG; on failure the
# output's tail goes into the file and the failure is counted.
run() {
  local log=$1
  shift
  emit "\`\`\`" "$(printf '%q ' "$@" | sed 's/ $//')" "\`\`\`"
  "$@" > "$log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    failures=$((failures + 1))
    emit "" "**failed (exit $rc)**, last lines:" "" "\`\`\`" "$(tail -15 "$log")" "\`\`\`" ""
  fi
  return "$rc"
}

table() {
  if ! python3 bench/suite_tables.py "$@" >> "$body" 2>&1; then
    failures=$((failures + 1))
    emit "(no table: suite_tables.py $*)"
  fi
}

# --- Build ---
build_seconds=0
if [ "$build_it" = 1 ]; then
  t0=$(date +%s)
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRAGSCOPE_BUILD_TESTS=OFF \
      > "$work/configure.log" 2>&1 || { tail -20 "$work/configure.log" >&2; exit 1; }
  fi
  targets=(gpu_allocator_comparison)
  if [ "$gpu_only" = 0 ]; then
    targets+=(allocator_benchmark allocator_threads_benchmark fslog_benchmark
              analysis_benchmark fragscope)
  fi
  if ! cmake --build "$build" --target help 2> /dev/null | grep -q gpu_allocator_comparison; then
    targets=("${targets[@]:1}")  # not configured: no CUDA or no LibTorch
  fi
  if [ "${#targets[@]}" -gt 0 ]; then
    cmake --build "$build" --target "${targets[@]}" -j"$(nproc)" > "$work/build.log" 2>&1 ||
      { tail -30 "$work/build.log" >&2; exit 1; }
  fi
  build_seconds=$(($(date +%s) - t0))
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt" 2> /dev/null)
build_type=${build_type:-prebuilt}
bench="$build/bench"

if [ "$gpu_only" = 0 ]; then
  # --- Hot path ---
  section "Allocator hot path (simulated backend; 1 and 4 threads, warm and random)"
  emit "CPU time per iteration, median of $reps repetitions of >= ${min_time} s. BM_WarmPair: one" \
    "malloc+free pair (ns per pair); BM_RandomAllocations/N/S: RMM's random_allocations, N max" \
    "live blocks, sizes up to S MiB (ns_per_op per operation); BM_ConcurrentStreams: warm pairs" \
    "on 1 or 4 threads, own streams, one allocator; BM_ConcurrentRandom: the random workload on" \
    "1 or 4 threads (ns_per_op: wall time per operation, all threads together)." ""
  run "$work/hot.log" "$bench/allocator_benchmark" --benchmark_filter="$hot_filter" \
    "${gbench_flags[@]}" --benchmark_out="$work/hot.json" && table gbench "$work/hot.json"
  emit ""
  run "$work/threads.log" "$bench/allocator_threads_benchmark" \
    --benchmark_filter="$threads_filter" "${gbench_flags[@]}" \
    --benchmark_out="$work/threads.json" && table gbench "$work/threads.json"

  # --- Logging overhead ---
  section "Logging overhead (.fslog writer)"
  emit "The warm pair with and without the writer attached (2 records per pair), CPU time, from" \
    "the hot-path run above; the writer drops records when the disk falls behind (counted in" \
    "dropped_records above). Then the writer's cost per event and the reader's throughput." ""
  [ -f "$work/hot.json" ] && table overhead "$work/hot.json"
  emit ""
  run "$work/log.log" "$bench/fslog_benchmark" --benchmark_filter="$log_filter" \
    "${gbench_flags[@]}" --benchmark_out="$work/log.json" && table gbench "$work/log.json"

  # --- Replay throughput and sweep scaling ---
  section "Replay throughput and sweep scaling (analyzer)"
  if [ "$quick" = 0 ]; then
    emit "analysis_benchmark: a synthetic 10 M-event training log replayed through the allocator" \
      "(items_per_second = events/s), with the analyze collectors, and swept under the default" \
      "sweep grid (configs) on 1..8 threads (items_per_second = events x configs / wall s)." ""
    run "$work/analysis.log" "$bench/analysis_benchmark" --benchmark_min_time="$min_time" \
      --benchmark_out_format=json --benchmark_out="$work/analysis.json" &&
      table gbench "$work/analysis.json"
    emit ""
  else
    emit "(--quick: analysis_benchmark skipped; the end-to-end commands below use a 1 M-event log)" ""
  fi
  # The sweep's grid is pinned (PyTorch's max_split_size_mb ladder, no expandable segments), so
  # that these figures stay comparable when the sweep's default grid grows.
  sweep_help=$("$build/fragscope" sweep --help 2>&1)
  scale_grid=(--max-split-size-mb "0,64,128,256,512,1024")
  if grep -q -- "--expandable-segments" <<< "$sweep_help"; then
    scale_grid+=(--expandable-segments "$(grep -o -i -m1 'false' <<< "$sweep_help" || echo false)")
  fi
  emit "End to end on a synthetic log of ${events} events (GNU time):" ""
  log="$work/synthetic.fslog"
  run "$work/write.log" "$bench/analysis_benchmark" --write_synthetic_log="$log" \
    --events="$events"
  cat "$log" > /dev/null 2>&1  # page cache: measure the analyzer, not the disk
  rows=()
  timed() {  # timed LABEL CMD...: a row of wall, user CPU, max RSS, replayed events/s
    local label=$1 replays wall user rss t0
    shift
    t0=$(date +%s.%N)
    if [ -x /usr/bin/time ]; then
      run "$work/timed.log" /usr/bin/time -o "$work/time.txt" -f "%e %U %M" "$@" || return
      read -r wall user rss < "$work/time.txt"
      user="$user s" rss="$((rss / 1024)) MiB"
    else  # no GNU time (Debian package "time"): wall time only
      run "$work/timed.log" "$@" || return
      wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
      user="n/a" rss="n/a"
    fi
    # A sweep replays the log once per configuration ("... N configurations on ...").
    replays=$(grep -o -m1 '[0-9]* configurations' "$work/timed.log" | cut -d' ' -f1)
    replays=${replays:-1}
    [ "$replays" -gt 1 ] && label="$label ($replays configurations)"
    rows+=("| $label | $wall s | $user | $rss | $(awk -v e="$events" -v n="$replays" -v w="$wall" 'BEGIN {printf "%.2f M", (w > 0 ? e * n / w / 1e6 : 0)}') |")
  }
  timed "fragscope analyze --no-sweep" "$build/fragscope" analyze "$log" --no-sweep --no-summary
  threads=1
  while [ "$threads" -le "$(nproc)" ]; do
    timed "fragscope sweep --threads $threads" "$build/fragscope" sweep "$log" \
      "${scale_grid[@]}" --threads "$threads"
    threads=$((threads * 2))
  done
  [ $((threads / 2)) -ne "$(nproc)" ] && timed "fragscope sweep --threads $(nproc)" \
    "$build/fragscope" sweep "$log" "${scale_grid[@]}" --threads "$(nproc)"
  emit "" "| command | wall | user CPU | max RSS | events replayed per wall second (sweep: all configurations) |" \
    "|---|---:|---:|---:|---:|" "${rows[@]}"
  rm -f "$log"

  # --- Fragmentation on fixed traces ---
  section "Fragmentation on fixed traces (peak reserved / peak allocated per policy and threshold)"
  grid=(--max-split-size-mb "0,128,512" --roundup-power2-divisions ",4")
  dims="max_split_size_mb {unlimited, 128, 512} x roundup_power2_divisions {the trace's, 4}"
  if grep -q -- "--placement" <<< "$sweep_help"; then
    grid+=(--placement "best_fit,first_fit") && dims="$dims x placement {best_fit, first_fit}"
  fi
  if grep -q -- "--expandable-segments" <<< "$sweep_help"; then
    values=$(grep -o -i -m1 'false,true\|true,false' <<< "$sweep_help" || echo false,true)
    grid+=(--expandable-segments "$values") && dims="$dims x expandable_segments {$values}"
  fi
  emit "Grid: $dims (the dimensions \`fragscope sweep --help\` offers). Traces: PyTorch 2.11" \
    "oracle snapshots of GPT-2 training recorded on an H200 (tests/data/oracle; no capacity in" \
    "them, so the replay assumes 1 TiB: no OOMs), and \`fragscope demo\`'s log (16 GiB device," \
    "dies of a fragmentation OOM with PyTorch's defaults)." ""
  run "$work/demo.log" "$build/fragscope" demo --no-html --log "$work/demo.fslog"
  traces=(tests/data/oracle/gpt2_plain.pickle tests/data/oracle/gpt2_side_stream.pickle
          tests/data/oracle/gpt2_tuned.pickle "$work/demo.fslog")
  for trace in "${traces[@]}"; do
    name=$(basename "$trace" | sed 's/\.[a-z]*$//')
    run "$work/sweep-$name.log" "$build/fragscope" sweep "$trace" "${grid[@]}" \
      --json "$work/sweep-$name.json"
  done
  emit ""
  first=1
  for trace in "${traces[@]}"; do
    name=$(basename "$trace" | sed 's/\.[a-z]*$//')
    [ -f "$work/sweep-$name.json" ] || continue
    if [ "$first" = 1 ]; then table sweep "$name" "$work/sweep-$name.json"; first=0
    else python3 bench/suite_tables.py sweep "$name" "$work/sweep-$name.json" | tail -n +3 >> "$body"
    fi
  done
fi

# --- GPU ---
section "GPU: fragscope vs PyTorch's native allocator vs cudaMallocAsync vs cudaMalloc"
if [ -d "$build/syslibs" ]; then  # a prebuilt pack (bench/README.md): its libraries, torch's
  torch_dir=$(python3 -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('torch').origin))" 2> /dev/null)
  pack=$(cd "$build" && pwd)
  export LD_LIBRARY_PATH="$pack/syslibs${torch_dir:+:$torch_dir/lib:$(dirname "$torch_dir")/nvidia/cu13/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
gpu_bin="$bench/gpu_allocator_comparison"
[ -x "$build/bin/gpu_allocator_comparison" ] && gpu_bin="$build/bin/gpu_allocator_comparison"  # pack
if [ ! -x "$gpu_bin" ]; then
  emit "skipped: $gpu_bin was not built (it needs CUDA and LibTorch)"
elif ! command -v nvidia-smi > /dev/null; then
  emit "skipped: no GPU (no nvidia-smi on this machine)"
elif ! nvidia-smi -L > "$work/smi.txt" 2>&1; then
  emit "skipped: no GPU (nvidia-smi: $(head -1 "$work/smi.txt"))"
else
  emit "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)" ""
  run "$work/gpu.md" "$gpu_bin" "${gpu_flags[@]}" \
    --json "$work/gpu.json"
  emit "" && sed 's/^### .*//' "$work/gpu.md" >> "$body"
fi

# --- The file: a header, then the sections ---
total=$(($(date +%s) - suite_start))
{
  echo "# fragscope benchmark suite$([ "$quick" = 1 ] && echo " (--quick smoke run: not figures)")"
  echo
  echo "- machine: $machine"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit $commit"
  compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2> /dev/null | head -1)
  gbench_build=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['context']['library_build_type'])" "$work/hot.json" 2> /dev/null)
  echo "- build: \`$build\` ($build_type${compiler:+, $compiler})${gbench_build:+; the Google Benchmark library is a $gbench_build build}"
  echo "- command: \`bench/run_suite.sh${*:+ $*}\`; suite wall time ${total} s (build ${build_seconds} s)"
  echo "- failures: $failures"
  echo "- Figures from different machines are never compared (bench/README.md)."
  cat "$body"
} > "$out"
echo "run_suite.sh: wrote $out (${total} s, $failures failures)"
exit "$failures"
