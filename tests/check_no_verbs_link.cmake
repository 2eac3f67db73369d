# Fails when the shared library records a link-time dependency on rdma-core:
# libibverbs must only ever be dlopen'ed (README "RDMA"), so the library
# loads on machines without it.
execute_process(COMMAND ${OBJDUMP} -p ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "objdump -p failed on ${LIB}")
endif()
string(REGEX MATCHALL "NEEDED +[^\n]+" needed "${out}")
if(NOT needed)
  message(FATAL_ERROR "no NEEDED entries found in ${LIB}: cannot check")
endif()
foreach(n IN LISTS needed)
  if(n MATCHES "ibverbs|rdmacm|librdma")
    message(FATAL_ERROR "${LIB} links rdma-core directly (${n}); it must dlopen it")
  endif()
endforeach()
message(STATUS "no rdma-core in: ${needed}")
