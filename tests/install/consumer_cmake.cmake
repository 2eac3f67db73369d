# Configures, builds and runs tests/install/consumer against an installed
# prefix through find_package(ds4tp), linking the shared or static target.
#   cmake -DSRC=<consumer dir> -DBIN=<scratch dir> -DPREFIX=<prefix>
#         -DSTATIC=ON|OFF -DGENERATOR=<gen> [-DC_ONLY=ON] [-DFLAGS="<extra flags>"]
#         -P consumer_cmake.cmake
file(REMOVE_RECURSE "${BIN}")
# Only the prefix may provide ds4tp: nothing from the source or build tree.
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SRC}" -B "${BIN}" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DDS4TP_CONSUMER_STATIC=${STATIC}"
    "-DDS4TP_CONSUMER_C_ONLY=${C_ONLY}"
    "-DCMAKE_C_FLAGS=${FLAGS}" "-DCMAKE_CXX_FLAGS=${FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BIN}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed:\n${out}")
endif()
set(exes consumer)
if(NOT C_ONLY)
  list(APPEND exes consumer_cxx)
endif()
foreach(exe IN LISTS exes)
  execute_process(COMMAND "${BIN}/${exe}" TIMEOUT 60
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer OK")
    message(FATAL_ERROR "${exe} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${exe}: ${out}")
endforeach()
