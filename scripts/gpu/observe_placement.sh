#!/usr/bin/env bash
# observe_placement.sh OUT_DIR [PACK_DIR]: where fragscope's observe mode loses its time inside a
# PyTorch process (bench/RESULTS.md, "What recording costs PyTorch's own allocator").
#
# On the H100 host the observe mode added ~125-190 ns per event to PyTorch's allocator under
# `taskset -c 2,3`, 5-8x what the converter and the writer cost on their own, and less with the
# log on tmpfs. Two suspects: the writer's background thread sharing a physical core with the
# allocating thread (two CPUs of a taskset may be SMT siblings), and the writer thread's file
# system work. This runs bench/gpu_history_overhead (observe among its settings) with the process
# on two CPUs that are SMT siblings, then on two CPUs of different cores, each with the log on tmpfs
# (/dev/shm) and on disk (${TMPDIR:-/tmp}), and writes OUT_DIR/summary.md: the CPU topology, then
# each run's report. A placement the machine lacks (no SMT) is said and skipped.
#
# PACK_DIR (default build-gpu-pack): a pack or build directory, as for scripts/gpu_validate.sh.
# Environment: OBSERVE_PLACEMENT_ROUNDS (default 2), OBSERVE_PLACEMENT_TIMEOUT_S (per run,
# default 120). About 4 runs of 60-100 s; without a CUDA device each run prints its skip line and
# the script still exits 0. Exit status: the number of runs that failed.
set -u
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" && out=$(cd "$1" && pwd)
pack_arg=${2:-build-gpu-pack}
case "$pack_arg" in /*) ;; *) pack_arg=$PWD/$pack_arg ;; esac
cd "$root" || exit 2
# shellcheck source=scripts/gpu/pack_env.sh
source scripts/gpu/pack_env.sh "$pack_arg"
bin=$(dirname "$FRAGSCOPE_BENCH_BIN")/gpu_history_overhead
rounds=${OBSERVE_PLACEMENT_ROUNDS:-2}
limit=${OBSERVE_PLACEMENT_TIMEOUT_S:-120}
summary=$out/summary.md

# "A S D": a CPU this process may use, its SMT sibling (or -), and a CPU of another core (or -),
# each other than the first CPU (which takes most interrupts) when there is a choice.
read -r cpu_a cpu_sibling cpu_other < <(python3 - << 'EOF'
import os
def siblings(cpu):
    path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    try:
        text = open(path).read().strip()
    except OSError:
        return {cpu}
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus
allowed = sorted(os.sched_getaffinity(0))
a = allowed[2] if len(allowed) > 2 else allowed[-1]
sib = sorted(c for c in siblings(a) if c != a and c in allowed)
other = sorted((c for c in allowed if c not in siblings(a)), key=lambda c: c == allowed[0])
print(a, sib[0] if sib else "-", other[0] if other else "-")
EOF
)

{
  echo "# observe placement ($(date -u +%FT%TZ), pack $FRAGSCOPE_PACK)"
  echo
  echo "CPU $cpu_a, its SMT sibling $cpu_sibling, a CPU of another core $cpu_other;" \
    "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  echo
  echo '```'
  lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3)'
  lscpu -e 2>/dev/null | head -20
  echo '```'
} > "$summary"

if [ ! -x "$bin" ]; then
  echo "skipped: $bin is not in the pack" | tee -a "$summary"
  exit 0
fi
failures=0
for placement in siblings separate; do
  second=$cpu_sibling
  [ "$placement" = separate ] && second=$cpu_other
  for where in tmpfs disk; do
    dir=/dev/shm
    [ "$where" = disk ] && dir=${TMPDIR:-/tmp}
    {
      echo
      echo "## $placement ($cpu_a,$second), log on $where ($dir)"
      echo
    } >> "$summary"
    if [ "$second" = - ]; then
      echo "skipped: no such CPU here" >> "$summary"
      continue
    fi
    log_dir=$(mktemp -d "$dir/observe_placement.XXXXXX")
    timeout "$limit" taskset -c "$cpu_a,$second" "$bin" --rounds "$rounds" \
      --log-dir "$log_dir" --json "$out/${placement}_$where.json" >> "$summary" 2>&1 ||
      { echo "(exit status $?)" >> "$summary"; failures=$((failures + 1)); }
    rm -rf "$log_dir"
  done
done
cat "$summary"
exit "$failures"
