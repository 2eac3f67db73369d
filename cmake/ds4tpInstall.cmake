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

# ds4tp.pc names its prefix as an absolute path, so `pkg-config --cflags
# --libs ds4tp` prints clean flags (-I/opt/ds4tp/include, and nothing for
# /usr/include under the .deb): the path is the prefix being installed
# into, fixed when `cmake --install` (or cpack) runs. A relocatable .pc
# (prefix=${pcfiledir}/.., found from the file's own place, at the cost of
# unnormalised flags) is written for the tarball, for an install with
# DS4TP_PC_RELOCATABLE=1 in the environment, and for an absolute libdir
# or includedir never (those are used as they are). cpack says per
# generator which prefix the package installs into (ds4tpCPackOptions.cmake
# sets DS4TP_PC_PREFIX: /usr for the .deb, empty = relocatable for the
# tarball), as its staging directory is no place to name.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(DS4TP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(DS4TP_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(DS4TP_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  set(ds4tp_pc_up "")
else()
  file(RELATIVE_PATH ds4tp_pc_up "/p/${DS4TP_PC_DIR}" "/p")
  string(REGEX REPLACE "/$" "" ds4tp_pc_up "${ds4tp_pc_up}")
  set(DS4TP_PC_PREFIX "@DS4TP_PC_PREFIX@")  # filled in at install time
  set(DS4TP_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(DS4TP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What the static library links after itself (ds4tp.pc.in says why these
# are libraries, not required modules); the crypto backend decides whether
# libcrypto is among them.
set(DS4TP_PC_LIBS_PRIVATE "-luv -lfmt")
if(DS4TP_CRYPTO_BACKEND STREQUAL "libcrypto")
  string(APPEND DS4TP_PC_LIBS_PRIVATE " -lcrypto")
endif()
string(APPEND DS4TP_PC_LIBS_PRIVATE " -lstdc++ -lm -ldl -pthread")
configure_file(${PROJECT_SOURCE_DIR}/pkgconfig/ds4tp.pc.in ${PROJECT_BINARY_DIR}/ds4tp.pc.template @ONLY)
install(CODE "
  set(up \"${ds4tp_pc_up}\")
  if(DEFINED ENV{DS4TP_PC_PREFIX})
    set(pc_prefix \"\$ENV{DS4TP_PC_PREFIX}\")
  elseif(\"\$ENV{DS4TP_PC_RELOCATABLE}\" STREQUAL \"1\")
    set(pc_prefix \"\")
  else()
    set(pc_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  endif()
  string(REGEX REPLACE \"(.)/+$\" \"\\\\1\" pc_prefix \"\${pc_prefix}\")
  if(pc_prefix STREQUAL \"\" AND NOT up STREQUAL \"\")
    set(pc_prefix \"\\\${pcfiledir}/\${up}\")
  endif()
  file(READ \"${PROJECT_BINARY_DIR}/ds4tp.pc.template\" pc)
  string(REPLACE \"@DS4TP_PC_PREFIX@\" \"\${pc_prefix}\" pc \"\${pc}\")
  # One scratch file per destination: installs may run side by side.
  string(MD5 dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/pc-install/\${dest}/ds4tp.pc\" \"\${pc}\")
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${DS4TP_PC_DIR}\" TYPE FILE
       FILES \"${PROJECT_BINARY_DIR}/pc-install/\${dest}/ds4tp.pc\")
  file(REMOVE_RECURSE \"${PROJECT_BINARY_DIR}/pc-install/\${dest}\")
" COMPONENT dev)

# `cmake --install --strip` and cpack (CPACK_STRIP_FILES) strip the
# executables and the shared library; the archive's debug info goes too
# (--strip-debug keeps its symbol table, which the linker needs).
if(CMAKE_STRIP)
  install(CODE "
    if(CMAKE_INSTALL_DO_STRIP)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
        \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:ds4tp_static>\"
        RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR \"${CMAKE_STRIP} --strip-debug of the installed archive failed\")
      endif()
    endif()
  " COMPONENT dev)
endif()
