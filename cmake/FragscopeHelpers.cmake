# Small Bazel-like target helpers: one call per target, its sources and its dependencies, so each
# CMakeLists.txt reads as a list of targets. Every target of ours is built with warnings as errors;
# third-party headers are included as SYSTEM so their warnings do not count.

set(FRAGSCOPE_WARNINGS -Wall -Wextra -Werror -Wsign-conversion -Wno-missing-field-initializers)

# fragscope_cc_library(NAME name SRCS ... DEPS ... [PUBLIC_DEPS ...] [SHARED])
# Creates fragscope_<name> with alias fragscope::<name> (the name it is exported under, see
# cmake/FragscopeInstall.cmake). Header-only libraries omit SRCS. Sources include headers by their
# path from the repository root ("allocator/block.h"); the installed headers keep that layout under
# include/fragscope/.
function(fragscope_cc_library)
  cmake_parse_arguments(ARG "SHARED" "NAME" "SRCS;DEPS" ${ARGN})
  set(target fragscope_${ARG_NAME})
  if(ARG_SRCS)
    if(ARG_SHARED)
      add_library(${target} SHARED ${ARG_SRCS})
    else()
      add_library(${target} STATIC ${ARG_SRCS})
    endif()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FRAGSCOPE_WARNINGS}>)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                $<INSTALL_INTERFACE:include/fragscope>)
    target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                   $<INSTALL_INTERFACE:include/fragscope>)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${ARG_NAME})
  add_library(fragscope::${ARG_NAME} ALIAS ${target})
endfunction()

# fragscope_cc_test(NAME name SRCS ... DEPS ... [LABELS ...])
# One GoogleTest executable, its tests registered with ctest one by one.
function(fragscope_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${FRAGSCOPE_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  set(props "")
  if(ARG_LABELS)
    set(props PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60 ${props})
endfunction()

# fragscope_cc_binary(NAME name SRCS ... DEPS ...)
function(fragscope_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${FRAGSCOPE_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# fragscope_cc_benchmark(NAME name SRCS ... DEPS ...)
function(fragscope_cc_benchmark)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${FRAGSCOPE_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
