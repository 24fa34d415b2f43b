# tests/backend_schedules_run.cmake — the script of the backend_schedules and backend_racecheck
# tests (see tests/cli/backend_schedules.cmake; it lives outside tests/cli/, whose files
# CMakeLists.txt includes). Usage: cmake -DTESTS=<ctxlab_tests> -DDIR=<work dir> [-DMODE=racecheck]
# -P this file.
#   default: the backend table under the forward, reverse and shuffle:7 thread schedules, each run
#            writing a hash of every cuda case's output bytes (CTXLAB_BACKEND_DIGEST); the three
#            files must be identical.
#   racecheck: the backend table and BackendOpsEmu.* (every case under the three schedules) once
#            with the emulator's race detector on (CTXLAB_EMU_RACECHECK=1): any hazard, any
#            out-of-bounds access fails a case; a build without the access hooks fails the test.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
if(MODE STREQUAL "racecheck")
  set(ENV{CTXLAB_EMU_RACECHECK} 1)
  set(ENV{CTXLAB_EMU_SCHEDULE} forward)
  execute_process(COMMAND ${TESTS} "--gtest_filter=Devices/BackendOps.*/cuda:BackendOpsEmu.*"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  file(WRITE ${DIR}/racecheck.log "${_out}")
  if(NOT _rc EQUAL 0)
    # the lines that say what failed, again at the end (a CI log shows its last lines)
    string(REGEX MATCHALL "[^\n]*(race hazard|out-of-bounds|Failure|FAILED|spin-wait)[^\n]*" _why "${_out}")
    list(JOIN _why "\n" _why)
    message(FATAL_ERROR "backend table under the race detector failed (${DIR}/racecheck.log):\n${_out}\n"
                        "what failed:\n${_why}")
  endif()
  if(_out MATCHES "nothing is checked")
    message(FATAL_ERROR "backend_racecheck: the kernels were built without the emulator's access hooks:\n${_out}")
  endif()
  set(_cases 0)
  if(_out MATCHES "backend_ops cuda \\(cuda\\): ([0-9]+) cases compared")
    set(_cases ${CMAKE_MATCH_1})
  endif()
  if(_cases LESS 400)
    message(FATAL_ERROR "backend_racecheck: the backend table did not run its cases:\n${_out}")
  endif()
  message(STATUS "backend_racecheck: ${_cases} cases and BackendOpsEmu.* without a race hazard")
  return()
endif()
set(_schedules forward reverse shuffle:7)
foreach(_s ${_schedules})
  string(REPLACE ":" "_" _f ${_s})
  set(ENV{CTXLAB_EMU_SCHEDULE} ${_s})
  set(ENV{CTXLAB_BACKEND_DIGEST} ${DIR}/digest_${_f}.txt)
  execute_process(COMMAND ${TESTS} --gtest_filter=Devices/BackendOps.EveryMethodAgainstTheReference/cuda
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "backend table under schedule ${_s} failed:\n${_out}")
  endif()
endforeach()
file(STRINGS ${DIR}/digest_forward.txt _a)
list(LENGTH _a _n)
if(_n LESS 400)
  message(FATAL_ERROR "backend_schedules: only ${_n} digest lines in ${DIR}/digest_forward.txt")
endif()
foreach(_s reverse shuffle_7)
  file(STRINGS ${DIR}/digest_${_s}.txt _b)
  if(NOT _a STREQUAL _b)
    execute_process(COMMAND diff ${DIR}/digest_forward.txt ${DIR}/digest_${_s}.txt OUTPUT_VARIABLE _d)
    message(FATAL_ERROR "backend_schedules: outputs differ between the forward and ${_s} schedules:\n${_d}")
  endif()
endforeach()
message(STATUS "backend_schedules: ${_n} cases, forward, reverse and shuffle:7 bitwise equal")
