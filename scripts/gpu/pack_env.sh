# shellcheck shell=bash
# Sourced (bash): the environment that runs fragscope's binaries and hooks from a directory made
# by tests/gpu/pack_prebuilt.sh (hooks/, bin/, syslibs/) or from a build directory, with the
# machine's own torch. Usage, from the repository root: source scripts/gpu/pack_env.sh DIR
# Sets FRAGSCOPE_PACK (absolute DIR), FRAGSCOPE_PACK_LAYOUT (pack|build|missing), FRAGSCOPE_BIN,
# FRAGSCOPE_FSLOG_COUNTS, FRAGSCOPE_BENCH_BIN, FRAGSCOPE_LIB_DIR, PYTHONPATH and LD_LIBRARY_PATH
# (the pack's libraries, its Abseil copies, torch's lib/ and the CUDA 13 runtime of the wheel).
# Missing binaries leave their variable pointing at a path that does not exist.
FRAGSCOPE_PACK=$(cd "${1:-build-gpu-pack}" 2>/dev/null && pwd || echo "${1:-build-gpu-pack}")
if [ -x "$FRAGSCOPE_PACK/bin/fslog_counts" ] || [ -x "$FRAGSCOPE_PACK/bin/fragscope" ]; then
  FRAGSCOPE_PACK_LAYOUT=pack
  FRAGSCOPE_BIN=$FRAGSCOPE_PACK/bin/fragscope
  FRAGSCOPE_FSLOG_COUNTS=$FRAGSCOPE_PACK/bin/fslog_counts
  FRAGSCOPE_BENCH_BIN=$FRAGSCOPE_PACK/bin/gpu_allocator_comparison
elif [ -x "$FRAGSCOPE_PACK/fragscope" ]; then
  FRAGSCOPE_PACK_LAYOUT=build
  FRAGSCOPE_BIN=$FRAGSCOPE_PACK/fragscope
  FRAGSCOPE_FSLOG_COUNTS=$FRAGSCOPE_PACK/tests/gpu/fslog_counts
  FRAGSCOPE_BENCH_BIN=$FRAGSCOPE_PACK/bench/gpu_allocator_comparison
else
  FRAGSCOPE_PACK_LAYOUT=missing
  FRAGSCOPE_BIN=$FRAGSCOPE_PACK/bin/fragscope
  FRAGSCOPE_FSLOG_COUNTS=$FRAGSCOPE_PACK/bin/fslog_counts
  FRAGSCOPE_BENCH_BIN=$FRAGSCOPE_PACK/bin/gpu_allocator_comparison
fi
FRAGSCOPE_LIB_DIR=$FRAGSCOPE_PACK/hooks
_fs_torch_dir=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))" 2>/dev/null)
LD_LIBRARY_PATH=$FRAGSCOPE_PACK/hooks:$FRAGSCOPE_PACK/syslibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -n "$_fs_torch_dir" ]; then
  LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_fs_torch_dir/lib:$(dirname "$_fs_torch_dir")/nvidia/cu13/lib
fi
PYTHONPATH=$PWD/hooks/python${PYTHONPATH:+:$PYTHONPATH}
unset _fs_torch_dir
export FRAGSCOPE_PACK FRAGSCOPE_PACK_LAYOUT FRAGSCOPE_BIN FRAGSCOPE_FSLOG_COUNTS \
  FRAGSCOPE_BENCH_BIN FRAGSCOPE_LIB_DIR LD_LIBRARY_PATH PYTHONPATH
