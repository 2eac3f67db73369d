# ctest bench_smoke: runs ds4tp_bench in its tiny configuration and checks
# that it printed its tables and wrote its files with measured rows. It
# asserts no speed: only that the bench still runs end to end.
#   cmake -DBENCH=path/to/ds4tp_bench -DOUT=dir [-DPYTHON=python3
#         -DSUMMARY=bench/summary.py] -P smoke.cmake
if(NOT BENCH OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DBENCH=<ds4tp_bench> -DOUT=<dir> -P smoke.cmake")
endif()
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${BENCH}" --quick --out "${OUT}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ds4tp_bench --quick failed (${rc}):\n${err}")
endif()
foreach(want "== Row gate" "== Batch gate" "== Big gate" "== Token loop" "== Control round trip"
             "== Group all-reduce" "== Targets"
             "lib adaptive" "raw busy" "raw busy+32 B" "lib default" "raw busy+sum"
             "raw busy+24 B+sum" "tcp all-reduce 16 KiB N=2")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the bench table lacks '${want}'")
  endif()
endforeach()
foreach(f table.txt results.csv samples-16k.csv)
  if(NOT EXISTS "${OUT}/${f}")
    message(FATAL_ERROR "the bench did not write ${OUT}/${f}")
  endif()
endforeach()
file(STRINGS "${OUT}/results.csv" rows)
list(LENGTH rows n)
# Header plus, for tcp alone (shm adds more): 2 row sizes x (3 library
# policies, 2 raw variants, 1 reference) = 12, 2 batch sizes x 5 = 10,
# 1 big x 6 (raw alternate too), 1 token x 5, 2 control cases x 5 = 10,
# 2 group sizes x (5 + 2 references) = 14: 58 lines.
set(least 58)
if(n LESS least)
  message(FATAL_ERROR "results.csv has ${n} lines, expected at least ${least}")
endif()
foreach(want "row,tcp,16384,1,1,,lib adaptive,-1," "row,tcp,16384,1,1,,raw busy,,30,"
             "token,tcp,16384,1,4,,raw block,,2," "big,tcp,1048576," "control,tcp,16384,1,1,eval+logits,lib spin_us=0,0,10,"
             "control,tcp,16384,1,1,mtp+ack,raw busy,,10,"
             "group,tcp,16384,1,1,,lib default,-1,30," "group,tcp,16384,1,1,,raw busy+24 B+sum,,30,")
  string(FIND "${rows}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "results.csv lacks a row starting '${want}'")
  endif()
endforeach()
file(STRINGS "${OUT}/samples-16k.csv" samples)
list(LENGTH samples ns)
if(ns LESS 151)  # header + 30 samples x 5 variants over tcp
  message(FATAL_ERROR "samples-16k.csv has ${ns} lines, expected at least 151")
endif()
# summary.py (the tables of bench/README.md and bench/results/) reads
# the run back: every target figure of the default policy is there.
if(PYTHON AND SUMMARY)
  execute_process(COMMAND "${PYTHON}" "${SUMMARY}" "${OUT}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE md ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "summary.py failed (${rc}):\n${err}")
  endif()
  string(REGEX MATCH "\n\\| [^|\n]+ \\| (not )?pinned \\|[^\n]*" row "${md}")
  string(REGEX MATCHALL "[0-9]+\\.[0-9][0-9][0-9]x" cells "${row}")
  list(LENGTH cells nc)
  set(figures 6)  # tcp: gate p50, p99, two control ops, all-reduce, big gate
  string(FIND "${rows}" "row,shm,16384," shm_at)
  if(NOT shm_at EQUAL -1)
    set(figures 8)  # shm ran too: its gate and big gate
  endif()
  if(NOT nc EQUAL figures)
    message(FATAL_ERROR "summary.py gave ${nc} of ${figures} target figures for the run:\n${md}")
  endif()
endif()
message(STATUS "bench smoke OK")
