#!/bin/bash
# shellcheck disable=SC2317  # the step functions are called through `bash -c step_NAME`
# The whole GPU validation in one call, on a machine with an NVIDIA GPU, torch and
# transformers but no build toolchain: fragscope's binaries come from a pack made where it was
# built (tests/gpu/pack_prebuilt.sh BUILD PACK), or from a build directory.
#
#   scripts/gpu_validate.sh OUT_DIR [PACK_DIR]        (from the repository root or anywhere)
#
# Steps, each in its own directory of OUT_DIR, each time-limited, each recorded in steps.tsv
# whatever the others did:
#   tests      tests/gpu/run_prebuilt.sh (or ctest -L gpu for a build directory)
#   oracle     _record_memory_history + _dump_snapshot of GPT-2 small training (plain, side
#              stream + record_stream, max_split_size_mb + roundup_power2_divisions), and
#              `fragscope verify` of each
#   modes      50 steps of GPT-2 small natively, replace, observe, interpose (observe, cache)
#   oom        a fragmentation OOM under a memory fraction: observed, analyzed, swept, fixed
#   bench      bench/gpu_allocator_comparison and bench/gpu_history_overhead, if the pack has them
#   estimator  measured peak memory of GPT-2 124M/355M and a 1.1B Llama vs `fragscope estimate`
# and the second round's (GPU_VALIDATE_STEPS="predict bigjob pools observecost wheel parallel"):
#   predict    six models x two shapes on the GPU under observe vs `python -m fragscope predict`
#              (peaks, allocation count, OOM at 0.9x / 1.1x the measured peak reserved)
#   bigjob     a 1.1B Llama with variable sequence lengths under a cap where it dies of
#              fragmentation: the whole-job verdict, the recommendation, the rerun with it
#   pools      oracle traces of CUDA graphs in a shared pool, torch.compile reduce-overhead and
#              MemPool/use_mem_pool (snapshots, and observed logs of the graph and MemPool jobs),
#              and `fragscope verify` of each
#   observecost  observe's ns per event, the pack against GPU_VALIDATE_BASELINE_PACK (before),
#              and `perf record` of the observe run
#   wheel      the wheel in build-wheel/ (GPU_VALIDATE_WHEEL_DIR) installed offline into a venv:
#              the hook modes in the GPT-2 job through the installed package
#   parallel   one rank of FSDP2 and DDP jobs under the fake process group on the GPU vs
#              `python -m fragscope predict --parallel`, and `fragscope verify` of its log
# and the third round's (GPU_VALIDATE_STEPS="predict3 contexts"):
#   predict3   eight architectures not yet recorded (train_job.ROUND3_MODELS: qwen2, qwen3_moe,
#              gemma2, phi3, falcon, olmo2, deepseek_v3, starcoder2; two layers each) x two shapes
#              x fused and foreach AdamW, three steps, as predict measures them
#   contexts   GPT-2 124M observed plainly and with name_modules() + name_roles() (the same
#              allocations; roles and modules at the peak; diffed against predict), and a
#              4-layer Llama's generate, dynamic and static caches, against predict --generate
#   compile    GPT-2 124M (four layers) torch.compile'd (inductor; modes default and
#              reduce-overhead), trained and run for inference, observed, against
#              `python -m fragscope predict --compile [--compile-mode reduce-overhead]`
#   adapters   a 4-layer Llama's peft LoRA (and QLoRA where bitsandbytes' kernels run) trained,
#              and its forward captured into a CUDA graph and replayed, observed, against
#              `python -m fragscope predict --lora|--qlora|--cuda-graphs`
# then OUT_DIR/summary.md (also rewritten after every step) with every figure, the GPU, driver,
# torch version, date and commit. Artifacts are kept small: snapshots under 1 MB each, .fslog
# files over 1 MB are deleted once checked.
#
# Environment: GPU_VALIDATE_STEPS (default "tests oracle modes oom bench estimator"),
# GPU_VALIDATE_BASELINE_PACK (observecost's "before" pack), GPU_VALIDATE_WHEEL_DIR,
# GPU_VALIDATE_PREDICT_MODELS (predict's and predict3's --models: all six of predict take ~480 s
# on an H100), GPU_VALIDATE_OPTIMIZERS (predict3's --optimizers, default fused,foreach),
# GPU_VALIDATE_BUDGET_S (default 540: no step starts after it, and each step's limit is cut to
# what is left). Without a CUDA device every GPU step prints "skipped: no CUDA device" (the oom
# step still runs its CPU design check) and the script exits 0. GPU_VALIDATE_DRY_RUN=1 runs the
# predict, bigjob, pools, parallel, predict3, contexts, compile and adapters steps on the CPU
# with small models (scripts/gpu/dry_run.sh, ctest scripts.gpu.dry_run.*). Exit status: the number of steps that failed, timed out or were
# not run for lack of time.
set -u
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '3,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1" && out=$(cd "$1" && pwd)
pack_arg=${2:-build-gpu-pack}
case "$pack_arg" in /*) ;; *) pack_arg=$PWD/$pack_arg ;; esac
cd "$root" || exit 2
steps=${GPU_VALIDATE_STEPS:-tests oracle modes oom bench estimator}
budget=${GPU_VALIDATE_BUDGET_S:-540}
# shellcheck source=scripts/gpu/pack_env.sh
source scripts/gpu/pack_env.sh "$pack_arg"
: > "$out/steps.tsv"
python3 scripts/gpu/summary.py env "$out" "$FRAGSCOPE_PACK" > /dev/null 2>&1 ||
  echo '{"torch": "python3 scripts/gpu/summary.py env failed"}' > "$out/env.json"
echo "gpu_validate: out $out, binaries $FRAGSCOPE_PACK ($FRAGSCOPE_PACK_LAYOUT), budget ${budget}s"
echo "gpu_validate: $(tr -d '\n' < "$out/env.json" | head -c 600)"
failures=0

# Each step runs in `bash -c` under timeout(1), with STEP_DIR set; they print
# "skipped: no CUDA device" without a GPU.
drop_logs_over() {  # MB: the step's .fslog files over that size are deleted once checked
  find "$STEP_DIR" -name '*.fslog' -size +$(($1 * 1024))k -print -delete |
    sed "s/^/deleted (over $1 MB): /"
}
need() {  # a binary a step cannot run without
  [ -x "$1" ] && return
  echo "error: $1 is missing (make the pack with tests/gpu/pack_prebuilt.sh)"
  exit 3
}
step_tests() {
  if [ "$FRAGSCOPE_PACK_LAYOUT" = build ]; then
    ctest --test-dir "$FRAGSCOPE_PACK" -L gpu --output-on-failure --timeout 240
  else
    OUT=$STEP_DIR/logs tests/gpu/run_prebuilt.sh "$FRAGSCOPE_PACK"
  fi
  rc=$?
  python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
    echo "skipped: no CUDA device (the tests above ran and skipped themselves)"
  exit "$rc"
}
step_oracle() {
  need "$FRAGSCOPE_BIN"
  python3 scripts/gpu/record_oracle_traces.py "$STEP_DIR" --only gpt2 --gpt2-layers 12 \
    --gpt2-steps 2 --gpt2-warmup 1 || exit 1
  [ -f "$STEP_DIR/env.json" ] || exit 0  # no GPU: record_oracle_traces.py said so
  total=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['total_memory'])" \
    "$STEP_DIR/env.json")
  rc=0
  for p in "$STEP_DIR"/gpt2_*.pickle; do
    name=$(basename "$p" .pickle)
    "$FRAGSCOPE_BIN" verify "$p" --capacity "$total" > "$STEP_DIR/verify_$name.txt" 2>&1 || rc=1
    echo "$name: $(head -1 "$STEP_DIR/verify_$name.txt")"
  done
  exit "$rc"
}
step_modes() {
  need "$FRAGSCOPE_FSLOG_COUNTS"
  python3 scripts/gpu/modes_check.py all "$STEP_DIR" --steps 50 --timeout 110
  rc=$?
  drop_logs_over 1
  exit "$rc"
}
step_oom() {
  need "$FRAGSCOPE_BIN"
  python3 scripts/gpu/oom_check.py "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" --allowed-gib 4
  rc=$?
  drop_logs_over 1
  exit "$rc"
}
step_bench() {
  if [ ! -x "$FRAGSCOPE_BENCH_BIN" ]; then
    echo "skipped: $FRAGSCOPE_BENCH_BIN is not in the pack" | tee "$STEP_DIR/bench.md"
    exit 0
  fi
  "$FRAGSCOPE_BENCH_BIN" --json "$STEP_DIR/bench.json" --log-dir "${TMPDIR:-/tmp}" \
    > "$STEP_DIR/bench.md"
  rc=$?
  # What recording costs PyTorch's own allocator; its observe log (hundreds of MB) is counted
  # (records kept, drops as warnings) and deleted.
  history_bin=$(dirname "$FRAGSCOPE_BENCH_BIN")/gpu_history_overhead
  if [ -x "$history_bin" ]; then
    log_dir=$(mktemp -d)
    echo >> "$STEP_DIR/bench.md"
    "$history_bin" --json "$STEP_DIR/history.json" --log-dir "$log_dir" >> "$STEP_DIR/bench.md" ||
      rc=1
    for log in "$log_dir"/*.fslog; do
      [ -e "$log" ] && echo "- the observe log read back: $("$FRAGSCOPE_FSLOG_COUNTS" "$log" |
        head -c 400)" >> "$STEP_DIR/bench.md"
    done
    rm -rf "$log_dir"
  fi
  cat "$STEP_DIR/bench.md"
  exit "$rc"
}
step_estimator() {
  need "$FRAGSCOPE_BIN"
  python3 scripts/gpu/estimator_accuracy.py all "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" \
    --timeout 150
}
# The second round. Without a GPU these skip, or run their CPU dry run with GPU_VALIDATE_DRY_RUN=1.
set_dry() {  # dry: the flags that make a step its CPU dry run
  dry=()
  if [ "$GPU_VALIDATE_DRY_RUN" = 1 ]; then dry=(--dry-run); fi
}
step_predict() {
  set_dry
  need "$FRAGSCOPE_BIN"
  models=()
  if [ -n "${GPU_VALIDATE_PREDICT_MODELS:-}" ]; then models=(--models "$GPU_VALIDATE_PREDICT_MODELS"); fi
  python3 scripts/gpu/predict_accuracy.py all "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" \
    --timeout 90 --jobs 6 "${models[@]}" "${dry[@]}"
}
step_predict3() {
  set_dry
  need "$FRAGSCOPE_BIN"
  models=()
  if [ -n "${GPU_VALIDATE_PREDICT_MODELS:-}" ]; then models=(--models "$GPU_VALIDATE_PREDICT_MODELS"); fi
  optimizers=()
  if [ -n "${GPU_VALIDATE_OPTIMIZERS:-}" ]; then optimizers=(--optimizers "$GPU_VALIDATE_OPTIMIZERS"); fi
  python3 scripts/gpu/predict_accuracy.py all "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" --round 3 \
    --timeout 90 --jobs 6 "${models[@]}" "${optimizers[@]}" "${dry[@]}"
}
step_bigjob() {
  set_dry
  need "$FRAGSCOPE_BIN"
  python3 scripts/gpu/big_job_check.py "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" --timeout 90 \
    "${dry[@]}"
  rc=$?
  drop_logs_over 4
  exit "$rc"
}
step_pools() {
  set_dry
  need "$FRAGSCOPE_BIN"
  python3 scripts/gpu/pools_oracle.py "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" --timeout 60 \
    "${dry[@]}"
}
step_observecost() {
  before=()
  if [ -d "${GPU_VALIDATE_BASELINE_PACK:-}" ]; then
    before=(--before "$(cd "$GPU_VALIDATE_BASELINE_PACK" && pwd)")
  elif [ -n "${GPU_VALIDATE_BASELINE_PACK:-}" ]; then
    echo "observecost: no directory $GPU_VALIDATE_BASELINE_PACK: this pack alone"
  fi
  # Without a before pack, two runs of this one.
  pairs=2
  if [ ${#before[@]} -gt 0 ]; then pairs=1; fi
  python3 scripts/gpu/observe_cost.py "$STEP_DIR" --after "$FRAGSCOPE_PACK" "${before[@]}" \
    --pairs "$pairs" --rounds 2 --timeout 60
}
step_wheel() {
  wheel_dir=${GPU_VALIDATE_WHEEL_DIR:-build-wheel}
  wheel=$(find "$wheel_dir" -maxdepth 1 -name "fragscope-*.whl" 2>/dev/null | sort | tail -1)
  if [ -z "$wheel" ]; then
    echo "skipped: no $wheel_dir/fragscope-*.whl (pip wheel . --no-deps -w $wheel_dir, carried)"
    exit 0
  fi
  python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
    { echo "skipped: no CUDA device"; exit 0; }
  # A venv over the system's packages (torch, transformers), else pip's --target directory.
  tmp=$(mktemp -d)
  if python3 -m venv --system-site-packages "$tmp/venv" 2>/dev/null; then
    py=$tmp/venv/bin/python site=''
    # A python3 that is itself a venv's (the GPU machines' is) lends the new venv its base
    # interpreter's packages, not its own: point the new venv at them with a .pth file.
    if ! "$py" -c "import torch" 2>/dev/null; then
      python3 -c "import site; print('\n'.join(site.getsitepackages()))" > \
        "$("$py" -c "import site; print(site.getsitepackages()[0])")/outer_site.pth"
    fi
    "$py" -m pip install --no-index --no-deps --quiet "$wheel" || exit 1
  else
    echo "wheel: no venv module here: pip install --target"
    py=python3 site=$tmp/site
    python3 -m pip install --no-index --no-deps --quiet --target "$site" "$wheel" || exit 1
  fi
  # The installed package, not hooks/python; its own hook libraries.
  lib=$(cd / && env -u FRAGSCOPE_LIB_DIR PYTHONPATH="$site" "$py" -c \
    "import fragscope; print(fragscope.lib_dir())") || exit 1
  echo "wheel: $wheel, fragscope from $(cd / && PYTHONPATH="$site" "$py" -c \
    "import fragscope; print(fragscope.__file__)"), hook libraries $lib"
  PYTHONPATH=$site FRAGSCOPE_LIB_DIR=$lib "$py" scripts/gpu/modes_check.py all \
    "$STEP_DIR" --steps 20 --timeout 60
  rc=$?
  drop_logs_over 1
  exit "$rc"
}
# A comparison step: scripts/gpu/SCRIPT runs its jobs observed (or, in a dry run, simulated) and
# diffs each against `fragscope predict`, each child within TIMEOUT seconds; its logs over MAX_MB
# are deleted once checked.
comparison_step() {  # SCRIPT TIMEOUT MAX_MB
  set_dry
  need "$FRAGSCOPE_BIN"
  python3 "scripts/gpu/$1" all "$STEP_DIR" --fragscope "$FRAGSCOPE_BIN" --timeout "$2" \
    "${dry[@]}"
  rc=$?
  drop_logs_over "$3"
  exit "$rc"
}
step_contexts() { comparison_step contexts_check.py 120 1; }
step_compile() { comparison_step compile_check.py 300 1; }
step_adapters() { comparison_step adapters_graphs_check.py 150 1; }
step_parallel() { comparison_step parallel_check.py 90 4; }
export -f need drop_logs_over set_dry comparison_step step_tests step_oracle step_modes step_oom \
  step_bench step_estimator step_predict step_predict3 step_bigjob step_pools step_observecost \
  step_wheel step_parallel step_contexts step_compile step_adapters
export GPU_VALIDATE_DRY_RUN=${GPU_VALIDATE_DRY_RUN:-0}

run_step() {  # NAME LIMIT_SECONDS
  local name=$1 limit=$2 dir=$out/$1 status rc t0 left
  case " $steps " in *" $name "*) ;; *) return ;; esac
  mkdir -p "$dir"
  left=$((budget - SECONDS - 10))
  if [ "$left" -lt 30 ]; then
    status="not run (the ${budget}s budget is spent)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" 0 "$dir" >> "$out/steps.tsv"
    echo "== $name: $status"
    failures=$((failures + 1))
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  t0=$SECONDS
  STEP_DIR=$dir timeout -k 10 "$limit" bash -c "step_$name" > "$dir/step.log" 2>&1
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    status="TIMEOUT after ${limit}s"
  elif [ $rc -eq 0 ] && grep -q "skipped: no CUDA device" "$dir/step.log"; then
    status="skipped: no CUDA device"
  elif [ $rc -eq 0 ] && grep -q "^skipped: " "$dir/step.log"; then
    status=$(grep -m1 "^skipped: " "$dir/step.log")
  elif [ $rc -eq 0 ]; then
    status=ok
  else
    status="FAILED (exit $rc)"
  fi
  case "$status" in TIMEOUT* | FAILED*) failures=$((failures + 1)) ;; esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" $((SECONDS - t0)) "$dir" >> "$out/steps.tsv"
  tail -n 25 "$dir/step.log" | sed 's/^/   /'
  echo "== $name: $status ($((SECONDS - t0))s)"
  python3 scripts/gpu/summary.py write "$out" > /dev/null 2>&1
}

run_step tests 150
run_step oracle 110
run_step modes 170
run_step oom 100
run_step bench 150
run_step estimator 200
run_step predict 210
run_step bigjob 110
run_step pools 80
run_step observecost 130
run_step wheel 150
run_step parallel 120
run_step predict3 560
run_step contexts 300
run_step compile 700
run_step adapters 300
python3 scripts/gpu/summary.py write "$out"
echo "gpu_validate: $failures step(s) failed, timed out or not run, in ${SECONDS}s"
echo "gpu_validate: summary: $out/summary.md"
exit $failures
