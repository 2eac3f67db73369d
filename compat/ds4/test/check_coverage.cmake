# Fails when a function that compat/ds4/ds4_tp.h declares for one header
# shape is neither defined in that shape's compat archive nor one of the
# engine's own (README "Migrating"). The header is preprocessed with the
# shape's macros and stand-in ds4.h first, so each shape is checked against
# exactly the declarations an engine of that shape sees.
cmake_minimum_required(VERSION 3.20)
set(engine_owned ds4_tp_validate_engine_options ds4_tp_worker_run)
execute_process(COMMAND ${CC} -E -P -DDS4_TP_COMPAT_SHAPE=${SHAPE} -I${INC} ${HEADER}
                OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_VARIABLE cc_err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preprocessing ${HEADER} for ${SHAPE} failed: ${cc_err}")
endif()
string(REGEX MATCHALL "[a-z_0-9 \\*]ds4_tp_[a-z_0-9]+\\(" decls "${text}")
execute_process(COMMAND ${NM} --defined-only ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
set(count 0)
foreach(d IN LISTS decls)
  string(REGEX MATCH "ds4_tp_[a-z_0-9]+" fn "${d}")
  if(fn IN_LIST engine_owned)
    continue()
  endif()
  if(NOT syms MATCHES " T ${fn}\n")
    message(FATAL_ERROR "${fn} is declared in ds4_tp.h (${SHAPE}) but not defined in ${LIB}")
  endif()
  math(EXPR count "${count}+1")
endforeach()
if(count LESS 45)
  message(FATAL_ERROR "only ${count} functions found in ${HEADER} (${SHAPE}); the header parse broke")
endif()
message(STATUS "${SHAPE}: ${count} seed functions defined; engine-owned: ${engine_owned}")
