#!/usr/bin/env bash
# Installs what fragscope's build needs and is missing on a fresh Debian 12 machine: Abseil,
# nlohmann/json, CLI11, zstd, GoogleTest, Google Benchmark, CMake, Ninja, clang (fuzzers), ccache,
# patchelf and the pinned scikit-build-core (the wheel: `pip install .` and its test), Chromium and
# the pinned playwright==1.65.2 (the viewer's test in a real browser, tests/view), and the
# pinned torch==2.11.0 wheel (LibTorch for the hooks; its nvidia-* dependencies provide the
# libraries torch links against), transformers==5.17.0 (fragscope.predict's Hugging Face loop),
# peft==0.21.2 and bitsandbytes==0.50.2 (its LoRA and QLoRA).
# The CUDA 13 toolkit is expected at /usr/local/cuda (it is on the project's machines); without
# it the CUDA and LibTorch parts are skipped and the core still builds.
# Idempotent: installs nothing that is already there.
set -euo pipefail

packages=(libabsl-dev googletest libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
          libcli11-dev libzstd-dev cmake ninja-build clang python3-pip ccache patchelf chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The wheel's build backend, for builds without pip's isolation (tests/packaging/wheel_test.sh).
if ! python3 -c "import scikit_build_core, sys; sys.exit(scikit_build_core.__version__ != '1.1.2')" \
    2>/dev/null; then
  echo "setup: installing scikit-build-core==1.1.2 (the wheel's build backend)"
  python3 -m pip install --quiet scikit-build-core==1.1.2
fi

# playwright drives Debian's chromium (its own browser downloads are not used).
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('playwright') != '1.65.2')" \
    2>/dev/null; then
  echo "setup: installing playwright==1.65.2 (the viewer's browser test)"
  python3 -m pip install --quiet playwright==1.65.2
fi

if [ "${FRAGSCOPE_SKIP_TORCH:-0}" != "1" ] && [ -d /usr/local/cuda ]; then
  if ! python3 -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.11.0')" \
      2>/dev/null; then
    echo "setup: installing torch==2.11.0 (LibTorch for fragscope's hooks)"
    python3 -m pip install --quiet torch==2.11.0
  fi
  # transformers for fragscope.predict's Hugging Face loop and its tests (tests/predict).
  if ! python3 -c "import transformers, sys; sys.exit(transformers.__version__ != '5.17.0')" \
      2>/dev/null; then
    echo "setup: installing transformers==5.17.0 (fragscope.predict)"
    python3 -m pip install --quiet transformers==5.17.0
  fi
  # peft and bitsandbytes for fragscope.predict's LoRA and QLoRA (--lora, --qlora).
  for pin in peft==0.21.2 bitsandbytes==0.50.2; do
    if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('${pin%%=*}') != \
        '${pin##*=}')" 2>/dev/null; then
      echo "setup: installing $pin (fragscope.predict --lora, --qlora)"
      python3 -m pip install --quiet "$pin"
    fi
  done
fi
