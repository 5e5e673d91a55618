# `cmake --install`: the fragscope command, the hook libraries, and a CMake package that other
# projects find with find_package(fragscope) and link as fragscope::allocator, fragscope::fslog,
# fragscope::analyzer, fragscope::estimator, ... (tests/cmake_consumer/ is such a project).
#
#   bin/fragscope
#   lib/libfragscope_{alloc,preload,torch}.so           the hooks (hooks/README.md)
#   lib/libfragscope_<name>.a                           the exported libraries
#   include/fragscope/<folder>/*.h                      their headers, included as "<folder>/x.h"
#   lib/cmake/fragscope/fragscope{Config,ConfigVersion,Targets}.cmake
#
# Abseil, Threads, nlohmann/json and zstd are found again by the consumer (find_dependency); Abseil
# is the system's, as for the build. The Python wheel installs a different layout
# (cmake/FragscopeWheel.cmake).

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The libraries a consumer links, with everything they link: an exported target may only depend on
# exported targets. The command line, the hooks' internals and the CUDA backend are not part of
# the package.
set(FRAGSCOPE_EXPORTED_LIBRARIES
    fragscope_base fragscope_options fragscope_allocator fragscope_fslog
    fragscope_fslog_reader fragscope_importers fragscope_demo_workload fragscope_replay
    fragscope_analyzer fragscope_estimator)

# Installed binaries find their libraries (and, in the wheel, the bundled Abseil) next to them;
# nothing points back into the build tree or at the build machine's torch or CUDA.
set_target_properties(fragscope PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(FRAGSCOPE_HOOK_LIBRARIES fragscope_alloc fragscope_preload)
if(TARGET fragscope_torch)
  list(APPEND FRAGSCOPE_HOOK_LIBRARIES fragscope_torch)
endif()
set_target_properties(${FRAGSCOPE_HOOK_LIBRARIES} PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS fragscope RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS ${FRAGSCOPE_HOOK_LIBRARIES}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)

install(TARGETS ${FRAGSCOPE_EXPORTED_LIBRARIES} EXPORT fragscopeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fragscope)
set(_headers ${CMAKE_INSTALL_INCLUDEDIR}/fragscope)
install(DIRECTORY allocator/ DESTINATION ${_headers}/allocator COMPONENT development
        FILES_MATCHING PATTERN "*.h" PATTERN "cuda_*.h" EXCLUDE PATTERN "virtual_memory.h" EXCLUDE)
install(DIRECTORY fslog/ DESTINATION ${_headers}/fslog COMPONENT development
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY analysis/ DESTINATION ${_headers}/analysis COMPONENT development
        FILES_MATCHING PATTERN "*.h" PATTERN "view" EXCLUDE)
install(DIRECTORY estimator/ DESTINATION ${_headers}/estimator COMPONENT development
        FILES_MATCHING PATTERN "*.h")

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/fragscope)
install(EXPORT fragscopeTargets NAMESPACE fragscope:: DESTINATION ${_cmake_dir}
        COMPONENT development)
configure_package_config_file(cmake/fragscopeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fragscopeConfig.cmake INSTALL_DESTINATION ${_cmake_dir})
# 0.x: a minor version may change the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fragscopeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fragscopeConfig.cmake
              ${PROJECT_BINARY_DIR}/fragscopeConfigVersion.cmake
        DESTINATION ${_cmake_dir} COMPONENT development)
