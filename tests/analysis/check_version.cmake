# cmake -DFRAGSCOPE=<binary> -DFLAG=<--version|-V> -DVERSION=<x.y.z> -P check_version.cmake
execute_process(COMMAND ${FRAGSCOPE} ${FLAG} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "fragscope ${VERSION}\n" OR NOT err STREQUAL "")
  message(FATAL_ERROR "fragscope ${FLAG}: exit ${rc}, stdout '${out}', stderr '${err}'; "
                      "expected exit 0 and 'fragscope ${VERSION}'")
endif()
