# cmake/NormgatePlugin.cmake: the source identity of a normgate plugin variant
# (capi/include/normgate/plugin.h, ng_plugin_variant::source_sha256).
#
#   normgate_plugin_sha256(VAR file1 [file2 ...])
#
# sets VAR to the SHA-256 (64 lowercase hex digits) of the manifest
# "sha256(file)  file\n" over the files in the order given, with the paths as
# given, relative to CMAKE_CURRENT_SOURCE_DIR: the same bytes as
# `sha256sum file1 file2 ... | sha256sum` run in that folder (the hash
# normgate's own variants use, kernels/CMakeLists.txt). Editing any of the
# files re-runs CMake, so the hash always matches what is compiled. List
# every file whose bytes define the variant's code (its sources and the
# headers they include); hand VAR to the compiler, e.g.
#   target_compile_definitions(my_plugin PRIVATE MY_SOURCE_SHA256="${VAR}")
function(normgate_plugin_sha256 var)
  if(ARGC LESS 2)
    message(FATAL_ERROR "normgate_plugin_sha256(${var}): no files given")
  endif()
  set(manifest "")
  foreach(f ${ARGN})
    if(IS_ABSOLUTE "${f}")
      message(FATAL_ERROR "normgate_plugin_sha256: '${f}' must be relative to ${CMAKE_CURRENT_SOURCE_DIR}")
    endif()
    set(path ${CMAKE_CURRENT_SOURCE_DIR}/${f})
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "normgate_plugin_sha256: no file '${path}'")
    endif()
    file(SHA256 ${path} h)
    string(APPEND manifest "${h}  ${f}\n")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
  endforeach()
  string(SHA256 combined "${manifest}")
  set(${var} ${combined} PARENT_SCOPE)
endfunction()
