# The ctest `packaging.cmake_consumer`: installs the build tree into a fresh prefix, builds
# cmake_consumer/ against that prefix alone (find_package(fragscope)), and runs it.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=<repository> -DWORK_DIR=... -DGENERATOR=...
#         -DCXX_COMPILER=... -DVERSION=... -P run_consumer.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "${command}: exit ${rc}\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The installed package names nothing of the build: no source or build directory in its CMake files.
file(GLOB package_files ${prefix}/lib*/cmake/fragscope/*.cmake)
if(NOT package_files)
  message(FATAL_ERROR "no CMake package installed under ${prefix}")
endif()
foreach(f IN LISTS package_files)
  file(READ ${f} text)
  foreach(dir ${SOURCE_DIR} ${BUILD_DIR})
    string(FIND "${text}" "${dir}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names ${dir}")
    endif()
  endforeach()
endforeach()

# The installed command runs from the prefix.
run(${prefix}/bin/fragscope --version)
if(NOT out STREQUAL "fragscope ${VERSION}\n")
  message(FATAL_ERROR "installed fragscope --version printed '${out}'")
endif()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/cmake_consumer -B ${WORK_DIR}/build
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
message(STATUS "consumer: ${out}")
