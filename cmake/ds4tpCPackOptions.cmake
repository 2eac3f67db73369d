# Read by cpack once per generator (CPACK_PROJECT_CONFIG_FILE): the .deb
# installs under /usr, the tarball unpacks to bin/, lib/, include/ at its
# top (relocatable: the tool's RPATH and the .pc are relative).
if(CPACK_GENERATOR STREQUAL "DEB")
  set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
else()
  set(CPACK_PACKAGING_INSTALL_PREFIX "/")
endif()
# The prefix ds4tp.pc names (see cmake/ds4tpInstall.cmake): the .deb's
# /usr; empty for the tarball, whose .pc finds it from its own place.
if(CPACK_GENERATOR STREQUAL "DEB")
  set(ENV{DS4TP_PC_PREFIX} "/usr")
else()
  set(ENV{DS4TP_PC_PREFIX} "")
endif()
