#!/bin/bash
# Runs the GPU tests from a directory made by pack_prebuilt.sh, from the repository root, with the
# machine's own torch. One process per GoogleTest test (each swaps PyTorch's allocator at most
# once), each limited to 240 s. Logs go to $OUT (or /tmp/fragscope-gpu-logs). Ends with a
# "N passed, N failed, N skipped" line; exit status: the number of failures.
# scripts/gpu_validate.sh runs it as its first step.
set -u
pack=$(cd "${1:-build-gpu-pack}" && pwd)
logs=${OUT:-/tmp/fragscope-gpu-logs}
mkdir -p "$logs"
torch_dir=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))" 2>/dev/null)
LD_LIBRARY_PATH=$pack/hooks:$pack/syslibs:$torch_dir/lib:$(dirname "$torch_dir")/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH
export PYTHONPATH=$PWD/hooks/python FRAGSCOPE_LIB_DIR=$pack/hooks FRAGSCOPE_FSLOG_COUNTS=$pack/bin/fslog_counts
failures=0
runs=0
skipped=0
skipped_in() { grep -qE '^\[  SKIPPED \] [0-9]+ test|^skipped: ' "$1"; }
for t in cuda_backend_gpu_test torch_replace_gpu_test torch_observe_gpu_test \
         torch_observe_fraction_gpu_test; do
  for name in $("$pack/bin/$t" --gtest_list_tests | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
    timeout -k 10 240 "$pack/bin/$t" --gtest_filter="$name" > "$logs/$name.log" 2>&1
    rc=$?
    runs=$((runs + 1))
    [ $rc -eq 0 ] && skipped_in "$logs/$name.log" && skipped=$((skipped + 1))
    echo "rc=$rc $name"
    [ $rc -ne 0 ] && failures=$((failures + 1)) && grep -E "Failure|Which is|Expected" "$logs/$name.log" | head -12
  done
done
for p in "torch_replace_gpu_test.py ctypes" "torch_replace_gpu_test.py torch" \
         "torch_observe_gpu_test.py" "torch_preload_gpu_test.py"; do
  log="$logs/py_${p// /_}.log"
  # shellcheck disable=SC2086  # $p is the script and its argument
  timeout -k 10 240 python3 tests/gpu/$p > "$log" 2>&1
  rc=$?
  runs=$((runs + 1))
  [ $rc -eq 0 ] && skipped_in "$log" && skipped=$((skipped + 1))
  echo "rc=$rc $p: $(grep -E '^(ok|skipped)' "$log" | tail -1)"
  [ $rc -ne 0 ] && failures=$((failures + 1)) && tail -8 "$log"
done
echo "$((runs - failures - skipped)) passed, $failures failed, $skipped skipped"
exit $failures
