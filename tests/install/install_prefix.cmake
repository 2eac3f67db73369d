# ctest fixture: `cmake --install BUILD --prefix PREFIX` into an empty
# prefix, then checks that every promised file is there and that the
# shared library carries its versioned SONAME.
#   cmake -DBUILD=<build dir> -DPREFIX=<dir> -DSOVERSION=<major> -P install_prefix.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${PREFIX}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}")
endif()

include(GNUInstallDirs)
set(lib "${PREFIX}/${CMAKE_INSTALL_LIBDIR}")
foreach(f
    "${PREFIX}/include/ds4tp/ds4tp.h"
    "${PREFIX}/include/ds4tp/ds4tp.hpp"
    "${lib}/libds4tp.so"
    "${lib}/libds4tp.so.${SOVERSION}"
    "${lib}/libds4tp.a"
    "${lib}/cmake/ds4tp/ds4tpConfig.cmake"
    "${lib}/cmake/ds4tp/ds4tpConfigVersion.cmake"
    "${lib}/cmake/ds4tp/ds4tpTargets.cmake"
    "${lib}/pkgconfig/ds4tp.pc")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "not installed: ${f}\ninstall output:\n${out}")
  endif()
endforeach()
if(NOT IS_SYMLINK "${lib}/libds4tp.so")
  message(FATAL_ERROR "${lib}/libds4tp.so should be the development symlink")
endif()

execute_process(COMMAND readelf -d "${lib}/libds4tp.so" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf failed on ${lib}/libds4tp.so")
endif()
if(NOT dyn MATCHES "Library soname: \\[libds4tp\\.so\\.${SOVERSION}\\]")
  message(FATAL_ERROR "libds4tp.so lacks SONAME libds4tp.so.${SOVERSION}:\n${dyn}")
endif()
# The installed tool finds the installed library relative to itself.
set(tool "${PREFIX}/${CMAKE_INSTALL_BINDIR}/ds4tp")
if(EXISTS "${tool}")
  execute_process(COMMAND readelf -d "${tool}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  file(RELATIVE_PATH rel "/p/${CMAKE_INSTALL_BINDIR}" "/p/${CMAKE_INSTALL_LIBDIR}")
  string(FIND "${dyn}" "[$ORIGIN/${rel}]" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${tool} lacks the relative RPATH $ORIGIN/${rel}:\n${dyn}")
  endif()
endif()
message(STATUS "installed into ${PREFIX}; SONAME libds4tp.so.${SOVERSION}")
