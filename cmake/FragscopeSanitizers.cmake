# The fuzz build (-DFRAGSCOPE_BUILD_FUZZERS=ON) compiles the code under test with coverage, ASan
# and UBSan (tests/fuzz/CMakeLists.txt). Every other executable that links it links those runtimes
# too, so that the whole tree builds there; shared libraries leave the runtimes' symbols to the
# executable that loads them (hooks/ drops --no-undefined in that build).
if(FRAGSCOPE_BUILD_FUZZERS)
  add_link_options(-fsanitize=address,undefined)
endif()

# -DFRAGSCOPE_SANITIZE=address|undefined|thread instruments every target of the build.
if(FRAGSCOPE_SANITIZE STREQUAL "")
  return()
endif()
if(FRAGSCOPE_SANITIZE STREQUAL "address")
  set(_flags -fsanitize=address -fno-omit-frame-pointer)
elseif(FRAGSCOPE_SANITIZE STREQUAL "undefined")
  set(_flags -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
elseif(FRAGSCOPE_SANITIZE STREQUAL "thread")
  set(_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "FRAGSCOPE_SANITIZE must be address, undefined or thread, got '${FRAGSCOPE_SANITIZE}'")
endif()
# Only C and C++ are compiled here (CUDA code is host C++ calling the runtime).
add_compile_options(${_flags})
add_link_options(${_flags})
