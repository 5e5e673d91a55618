# The dependency table of DESIGN.md ("Folders and what may depend on what"), checked on the include
# lines: every `#include "<folder>/..."` of a product file names a folder its row allows, CUDA
# headers stand only where the allocator talks to the driver, and LibTorch only in hooks/torch_*.
# Run: cmake -DSOURCE_DIR=<repository> -P check_includes.cmake (ctest: layering.includes).
cmake_minimum_required(VERSION 3.20)

# The rows, most specific first: a file belongs to the first whose folder holds it. `analysis:`
# is the files at the root of analysis/ (the pipeline and the demo), not its rooms.
set(rows
  "allocator/|allocator"
  "fslog/|fslog allocator"
  "estimator/|estimator"
  "hooks/|hooks allocator fslog"
  "analysis/sources/|analysis/sources allocator fslog"
  "analysis/replay/|analysis/replay analysis/sources allocator fslog"
  "analysis/metrics/|analysis/metrics analysis/replay analysis/sources allocator fslog"
  "analysis/explain/|analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator"
  "analysis/report/|analysis/report analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator"
  "analysis/ranks/|analysis/ranks analysis: analysis/report analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator"
  "analysis/view/|analysis/view analysis/ranks analysis: analysis/report analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator"
  "analysis/|analysis: analysis/report analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator"
  "cli/|cli analysis/view analysis/ranks analysis: analysis/report analysis/explain analysis/metrics analysis/replay analysis/sources allocator fslog estimator")
# The folders an include can name; includes of anything else (absl/, nlohmann/, gtest/, ...) are
# third-party and not checked here.
set(ours allocator fslog estimator hooks analysis cli tests bench)

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "give -DSOURCE_DIR=<repository root>")
endif()

# The room of an included path: its folder as the rows name it.
function(room_of path out)
  foreach(room analysis/sources analysis/replay analysis/metrics analysis/explain analysis/report
               analysis/ranks analysis/view)
    if(path MATCHES "^${room}/")
      set(${out} ${room} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(path MATCHES "^analysis/")
    set(${out} "analysis:" PARENT_SCOPE)
    return()
  endif()
  string(REGEX REPLACE "/.*" "" top "${path}")
  set(${out} ${top} PARENT_SCOPE)
endfunction()

set(violations "")
set(checked 0)
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/allocator/*.h ${SOURCE_DIR}/allocator/*.cc
     ${SOURCE_DIR}/fslog/*.h ${SOURCE_DIR}/fslog/*.cc
     ${SOURCE_DIR}/estimator/*.h ${SOURCE_DIR}/estimator/*.cc
     ${SOURCE_DIR}/hooks/*.h ${SOURCE_DIR}/hooks/*.cc
     ${SOURCE_DIR}/analysis/*.h ${SOURCE_DIR}/analysis/*.cc
     ${SOURCE_DIR}/cli/*.h ${SOURCE_DIR}/cli/*.cc)
foreach(file IN LISTS files)
  if(file MATCHES "^hooks/python/")
    continue()
  endif()
  set(allowed "")
  foreach(row IN LISTS rows)
    string(REPLACE "|" ";" parts "${row}")
    list(GET parts 0 folder)
    if(file MATCHES "^${folder}")
      list(GET parts 1 allowed)
      break()
    endif()
  endforeach()
  string(REPLACE " " ";" allowed "${allowed}")
  math(EXPR checked "${checked} + 1")
  file(STRINGS ${SOURCE_DIR}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" path "${line}")
    # CUDA: only where the allocator reaches the driver, and in the LibTorch hooks.
    if(path MATCHES "^(cuda|cuda_runtime|cuda_runtime_api|driver_types)\\.h$")
      if(NOT file MATCHES "^allocator/(cuda_backend_linked|cuda_vmm)\\.cc$" AND
         NOT file MATCHES "^hooks/torch_")
        list(APPEND violations "${file}: CUDA header <${path}>")
      endif()
      continue()
    endif()
    if(path MATCHES "^(torch|c10|ATen)/")
      if(NOT file MATCHES "^hooks/torch_")
        list(APPEND violations "${file}: LibTorch header <${path}>")
      endif()
      continue()
    endif()
    string(REGEX REPLACE "/.*" "" top "${path}")
    if(NOT path MATCHES "/" OR NOT top IN_LIST ours)
      continue()
    endif()
    room_of("${path}" room)
    if(NOT room IN_LIST allowed)
      list(APPEND violations "${file}: \"${path}\" (${room} is not in the row of its folder)")
    endif()
  endforeach()
endforeach()

if(checked LESS 100)
  message(FATAL_ERROR "only ${checked} files found under ${SOURCE_DIR}: wrong SOURCE_DIR?")
endif()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "includes against DESIGN.md's table:\n  ${text}")
endif()
message(STATUS "${checked} files: every include follows DESIGN.md's table")
