# cpack: system packages from the install rules' components.
#   .deb  libds4tp0      runtime: libds4tp.so.0 and the ds4tp tool
#         libds4tp-dev   headers, libds4tp.so, libds4tp.a, CMake package, ds4tp.pc
#   .tar.gz              everything, relocatable (relative RPATH, .pc from pcfiledir;
#                        the .deb's .pc names /usr)
# `cd build && cpack` (or scripts/package-check.sh, which also checks them).
# Included last from the top-level CMakeLists.txt.
set(CPACK_PACKAGE_NAME "libds4tp")
set(CPACK_PACKAGE_VENDOR "libds4tp")
set(CPACK_PACKAGE_CONTACT "libds4tp maintainers <ds4tp@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Tensor-parallel transport between the ranks of an LLM inference engine")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_GENERATOR "DEB;TGZ" CACHE STRING "cpack generators")
set(CPACK_PACKAGE_DIRECTORY "${PROJECT_BINARY_DIR}/packages")
# Stripped executables and shared library, and the archive without its
# debug sections (cmake/ds4tpInstall.cmake; plain cmake --install keeps
# the debug info of RelWithDebInfo builds, --strip drops it too).
set(CPACK_STRIP_FILES ON)
# The .deb installs under /usr, the tarball at its top level (bin/, lib/,
# include/): set per generator by cmake/ds4tpCPackOptions.cmake.
set(CPACK_PROJECT_CONFIG_FILE "${PROJECT_SOURCE_DIR}/cmake/ds4tpCPackOptions.cmake")

# The tarball: one archive of every component, unpackable anywhere.
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)
set(CPACK_ARCHIVE_FILE_NAME "libds4tp-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}")

# Debian: one package per component, the runtime named after the SONAME.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/libds4tp/libds4tp")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME "libds4tp${PROJECT_VERSION_MAJOR}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# Depends from the ELF files (libuv1, libfmt9, libssl3, libstdc++6, ...),
# and a shlibs file + ldconfig trigger for the versioned library.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME "libds4tp-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The static archive and the CMake package need the libraries' headers and
# link files (ds4tpConfig.cmake finds fmt, libuv and OpenSSL).
set(dev_deps "libds4tp${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION}), libuv1-dev, libfmt-dev, pkg-config")
if(DS4TP_CRYPTO_BACKEND STREQUAL "libcrypto")
  string(APPEND dev_deps ", libssl-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dev_deps}")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "libds4tp: the shared library (libds4tp.so.${PROJECT_VERSION_MAJOR}) and the ds4tp tool (probe, pair test)")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "libds4tp development files: ds4tp.h, the C++ wrapper, the static library, CMake package and pkg-config file")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)

include(CPack)
