#!/usr/bin/env bash
# Builds every libFuzzer target (clang) and runs each for SECONDS (default 60) over a scratch
# copy of its committed corpus (tests/fuzz/corpus/<name>/), with its dictionary when there is one.
# Any crash, sanitizer report or failed check fails the script; the reproducer is left in
# build-fuzz/. Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:-60}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DFRAGSCOPE_BUILD_FUZZERS=ON -DFRAGSCOPE_BUILD_TESTS=ON -DFRAGSCOPE_BUILD_BENCHMARKS=OFF \
  -DFRAGSCOPE_WITH_CUDA=OFF -DFRAGSCOPE_WITH_TORCH=OFF >/dev/null
targets=$(sed -n 's/^fragscope_cc_fuzz(NAME \([a-z0-9_]*\).*/\1/p' tests/fuzz/CMakeLists.txt)
cmake --build build-fuzz -j"$(nproc)" --target $targets
for target in $targets; do
  name=${target%_fuzz}
  mkdir -p "build-fuzz/corpus-$name"
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="$root/tests/fuzz/$name.dict")
  echo "fuzz: $target for ${seconds}s"
  # Run inside build-fuzz so crash reproducers land there.
  (cd build-fuzz && "./tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 \
     "${dict[@]}" "corpus-$name" "$root/tests/fuzz/corpus/$name" 2>&1 | tail -n 12)
done
