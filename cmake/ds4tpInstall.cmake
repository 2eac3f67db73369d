# cmake --install: libraries (shared with a versioned SONAME, static),
# the public headers, a CMake package (find_package(ds4tp) ->
# ds4tp::ds4tp, ds4tp::ds4tp_static) and ds4tp.pc. Included from the
# top-level CMakeLists.txt after lib/ defined the targets.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DS4TP_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/ds4tp")
set(DS4TP_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

# Gives an installed executable an RPATH that finds the installed library
# relative to itself ($ORIGIN on ELF, @loader_path on Mach-O). An absolute
# CMAKE_INSTALL_LIBDIR (or BINDIR) is used as it is.
function(ds4tp_relative_rpath target)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
    set(rpath "${CMAKE_INSTALL_FULL_LIBDIR}")
  else()
    file(RELATIVE_PATH rel "/p/${CMAKE_INSTALL_BINDIR}" "/p/${CMAKE_INSTALL_LIBDIR}")
    if(APPLE)
      set(rpath "@loader_path/${rel}")
    else()
      set(rpath "$ORIGIN/${rel}")
    endif()
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
endfunction()

install(TARGETS ds4tp ds4tp_static EXPORT ds4tpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# ds4tp.h (the ABI) and ds4tp.hpp (header-only C++ wrapper over it).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ds4tp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

install(EXPORT ds4tpTargets NAMESPACE ds4tp:: DESTINATION ${DS4TP_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ds4tpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ds4tpConfig.cmake INSTALL_DESTINATION ${DS4TP_CMAKE_DIR})
# Same major version = same ABI (ds4tp.h), so that is what a request matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ds4tpConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ds4tpConfig.cmake ${PROJECT_BINARY_DIR}/ds4tpConfigVersion.cmake
  DESTINATION ${DS4TP_CMAKE_DIR} COMPONENT dev)

# The .pc finds its prefix relative to itself, so `cmake --install --prefix`
# to any directory gives a working file (unless the dirs are absolute).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(DS4TP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(DS4TP_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(DS4TP_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH up "/p/${DS4TP_PC_DIR}" "/p")
  string(REGEX REPLACE "/$" "" up "${up}")
  set(DS4TP_PC_PREFIX "\${pcfiledir}/${up}")
  set(DS4TP_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(DS4TP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# The crypto backend decides whether the static library needs libcrypto.
set(DS4TP_PC_REQUIRES_PRIVATE "libuv fmt")
if(DS4TP_CRYPTO_BACKEND STREQUAL "libcrypto")
  string(APPEND DS4TP_PC_REQUIRES_PRIVATE " libcrypto")
endif()
configure_file(${PROJECT_SOURCE_DIR}/pkgconfig/ds4tp.pc.in ${PROJECT_BINARY_DIR}/ds4tp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ds4tp.pc DESTINATION ${DS4TP_PC_DIR} COMPONENT dev)
