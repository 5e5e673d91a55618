# Third-party dependencies. Abseil and GoogleTest are required; Google Benchmark only for bench/;
# CUDA and LibTorch are optional and detected (FRAGSCOPE_WITH_* = AUTO), or forced ON/OFF.
find_package(absl REQUIRED)
# The estimator reads model spec JSON with it (header-only).
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
# zstd: compressed .fslog logs (fslog/FORMAT.md); nlohmann/json: the rank summaries
# of `fragscope summarize` and `merge` (analysis/CROSS_RANK_SCHEMA.md). Debian: libzstd-dev,
# nlohmann-json3-dev (scripts/setup.sh installs them).
find_package(zstd CONFIG QUIET)
if(NOT TARGET zstd::libzstd_shared)
  message(FATAL_ERROR "zstd (with its CMake package) was not found: install libzstd-dev")
endif()
find_package(nlohmann_json 3.10 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR "nlohmann/json 3.10 or later was not found: install nlohmann-json3-dev")
endif()
# CLI11: the flag parser of every subcommand (cli/flag_parser.h; header-only, build time
# only). Debian: libcli11-dev.
find_package(CLI11 2.1 CONFIG QUIET)
if(NOT TARGET CLI11::CLI11)
  message(FATAL_ERROR "CLI11 2.1 or later was not found: install libcli11-dev")
endif()
if(FRAGSCOPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(FRAGSCOPE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# --- CUDA toolkit (headers and cudart; no GPU needed to build) ---
set(FRAGSCOPE_HAVE_CUDA OFF)
if(NOT FRAGSCOPE_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(FRAGSCOPE_HAVE_CUDA ON)
  elseif(FRAGSCOPE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FRAGSCOPE_WITH_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()

# --- LibTorch, from the installed torch wheel (pinned torch==2.11.0) ---
set(FRAGSCOPE_HAVE_TORCH OFF)
if(FRAGSCOPE_HAVE_CUDA AND NOT FRAGSCOPE_WITH_TORCH STREQUAL "OFF")
  if(NOT DEFINED Torch_DIR)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      # Locate the wheel without importing torch: `import torch` needs every nvidia-* runtime
      # library, the CMake package does not. -E: inside pip's isolated build environment (a
      # `pip install .`), look at the interpreter's own site-packages, where the job's torch is,
      # not only at the build requirements pip put on PYTHONPATH.
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -E -c
                "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'share', 'cmake'))"
        OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
        RESULT_VARIABLE _torch_rc)
      if(_torch_rc EQUAL 0 AND _torch_prefix)
        list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
      endif()
    endif()
  endif()
  # TorchConfig detects the local GPUs (a try_run of a CUDA program) unless an architecture list
  # is given, and that fails on machines without one. fragscope compiles no CUDA kernels, so any
  # list will do.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
  endif()
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(FRAGSCOPE_HAVE_TORCH ON)
  elseif(FRAGSCOPE_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "FRAGSCOPE_WITH_TORCH=ON but LibTorch was not found "
                        "(pip install torch==2.11.0, or set Torch_DIR)")
  endif()
endif()
