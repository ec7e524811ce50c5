# The exported CMake package (included last by the top-level CMakeLists.txt).
# After `cmake --install`, a project finds normgate with
#   find_package(normgate 0.2 CONFIG REQUIRED)   # CMAKE_PREFIX_PATH=<prefix>
# and gets:
#   normgate::capi       libnormgate_capi.so with normgate/capi.h (the C ABI)
#   normgate::cli        the normgate executable (imported)
#   normgate::plugin_abi normgate/plugin.h, header only, for plugin libraries
#   normgate_plugin_sha256(VAR files...)  a plugin's source identity
#                        (cmake/NormgatePlugin.cmake)
#   normgate_ROUTES_DIR  the installed route tables (share/normgate/routes)
#   normgate_HAVE_CUDA   ON when the kernels were built for the GPU, OFF for
#                        the CPU half (kernel calls then fail, saying so)
# The version file accepts requests of the same major.minor only (0.x: the
# C ABI may change between minor versions, capi.h).
# tests/install/ installs this build into a scratch prefix and builds a
# consumer against it.
include(CMakePackageConfigHelpers)
set(NORMGATE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/normgate)
install(EXPORT normgateTargets NAMESPACE normgate:: FILE normgateTargets.cmake
        DESTINATION ${NORMGATE_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/normgateConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/normgateConfig.cmake
                              INSTALL_DESTINATION ${NORMGATE_INSTALL_CMAKEDIR}
                              PATH_VARS NORMGATE_INSTALL_ROUTESDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/normgateConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/normgateConfig.cmake ${CMAKE_BINARY_DIR}/normgateConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/NormgatePlugin.cmake
        DESTINATION ${NORMGATE_INSTALL_CMAKEDIR})

# The Python wheel (pyproject.toml; scikit-build-core sets SKBUILD and
# installs into site-packages/normgate/): the package's version and whether
# the kernels were built for the GPU, read by normgate/_version.py.
if(SKBUILD)
  if(NORMGATE_HAVE_CUDA)
    set(ng_py_cuda True)
  else()
    set(ng_py_cuda False)
    message(STATUS "normgate: the Python package gets the CPU half only: no nvcc found (or NORMGATE_CUDA=OFF); "
                   "its kernel calls will fail saying so, the generator, the oracle and check() work")
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/python/_build_info.py
       "# Written by the wheel build (cmake/install.cmake); read by _version.py.\n"
       "version = \"${PROJECT_VERSION}\"\n"
       "cuda = ${ng_py_cuda}\n")
  install(FILES ${CMAKE_BINARY_DIR}/python/_build_info.py DESTINATION .)
endif()
