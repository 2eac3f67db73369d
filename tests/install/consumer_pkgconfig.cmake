# Builds and runs tests/install/consumer/consumer.c (and the C++ wrapper
# user) with nothing but `pkg-config --cflags --libs ds4tp` against an
# installed prefix; STATIC=ON links libds4tp.a with `pkg-config --static`.
#   cmake -DSRC=<consumer dir> -DBIN=<scratch dir> -DPREFIX=<prefix>
#         -DCC=<c compiler> -DCXX=<c++ compiler> -DSTATIC=ON|OFF
#         [-DFLAGS="<extra flags>"] -P consumer_pkgconfig.cmake
include(GNUInstallDirs)
file(REMOVE_RECURSE "${BIN}")
file(MAKE_DIRECTORY "${BIN}")
find_program(PKG_CONFIG pkg-config REQUIRED)
# pkg-config sees the prefix's ds4tp.pc and nothing else, as on a host
# without libuv, fmt or libcrypto development packages: the flags must
# still come (ds4tp.pc names them as libraries, not as modules).
set(ENV{PKG_CONFIG_LIBDIR} "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
unset(ENV{PKG_CONFIG_PATH})

function(pc out)
  execute_process(COMMAND "${PKG_CONFIG}" ${ARGN} ds4tp
    RESULT_VARIABLE rc OUTPUT_VARIABLE v ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} ds4tp failed: ${err}")
  endif()
  separate_arguments(v UNIX_COMMAND "${v}")
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

pc(cflags --cflags)
pc(libdir --variable=libdir)
if(STATIC)
  # The archive itself, then everything it needs (Libs.private).
  pc(libs --static --libs)
  list(REMOVE_ITEM libs "-lds4tp")
  set(libs "${libdir}/libds4tp.a" ${libs})
else()
  pc(libs --libs)
  # The prefix is not on the loader's path; an rpath finds the library.
  list(APPEND libs "-Wl,-rpath,${libdir}")
endif()
separate_arguments(flags UNIX_COMMAND "${FLAGS}")

set(builds
  "consumer|${CC}|-std=c99,-Wall,-Wextra,-Werror|${SRC}/consumer.c"
  "consumer_cxx|${CXX}|-std=c++20,-Wall,-Wextra,-Werror,-pedantic,-pthread|${SRC}/consumer_cxx.cpp")
foreach(b IN LISTS builds)
  string(REPLACE "|" ";" b "${b}")
  list(GET b 0 exe)
  list(GET b 1 compiler)
  list(GET b 2 std)
  list(GET b 3 src)
  string(REPLACE "," ";" std "${std}")
  set(cmd "${compiler}" ${std} ${flags} ${cflags} "${src}" -o "${BIN}/${exe}" ${libs})
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${cmd}")
    message(FATAL_ERROR "compiling ${exe} failed:\n${shown}\n${out}")
  endif()
  execute_process(COMMAND "${BIN}/${exe}" TIMEOUT 60
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer OK")
    message(FATAL_ERROR "${exe} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${exe}: ${out}")
endforeach()
