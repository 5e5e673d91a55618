#!/bin/bash
# Runs the GPU tests from a directory made by pack_prebuilt.sh, from the repository root, with the
# machine's own torch. One process per GoogleTest test (each swaps PyTorch's allocator at most
# once). Logs go to $OUT (or /tmp/fragscope-gpu-logs). Exit status: the number of failures.
set -u
pack=$(cd "${1:-build-gpu-pack}" && pwd)
logs=${OUT:-/tmp/fragscope-gpu-logs}
mkdir -p "$logs"
torch_dir=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))" 2>/dev/null)
export LD_LIBRARY_PATH=$pack/hooks:$pack/syslibs:$torch_dir/lib:$(dirname "$torch_dir")/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PWD/hooks/python FRAGSCOPE_LIB_DIR=$pack/hooks FRAGSCOPE_FSLOG_COUNTS=$pack/bin/fslog_counts
failures=0
for t in cuda_backend_gpu_test torch_replace_gpu_test torch_observe_gpu_test; do
  for name in $("$pack/bin/$t" --gtest_list_tests | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
    "$pack/bin/$t" --gtest_filter="$name" > "$logs/$name.log" 2>&1
    rc=$?
    echo "rc=$rc $name"
    [ $rc -ne 0 ] && failures=$((failures + 1)) && grep -E "Failure|Which is|Expected" "$logs/$name.log" | head -12
  done
done
for p in "torch_replace_gpu_test.py ctypes" "torch_replace_gpu_test.py torch" \
         "torch_observe_gpu_test.py" "torch_preload_gpu_test.py"; do
  log="$logs/py_${p// /_}.log"
  python3 tests/gpu/$p > "$log" 2>&1
  rc=$?
  echo "rc=$rc $p: $(grep -E '^(ok|skipped)' "$log" | tail -1)"
  [ $rc -ne 0 ] && failures=$((failures + 1)) && tail -8 "$log"
done
exit $failures
