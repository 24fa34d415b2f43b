# cmake/cli_checks.cmake — one way to register the end-to-end checks of tests/python/*_checks.py
# (tests/cli/*.cmake): a test PREFIX_SUB per sub-command SUB, run as
#   python3 tests/python/SCRIPT SUB --bin ctxlab --work BUILD/WORKDIR
# with 2 threads, passive OpenMP waits, no bytecode files, and the given timeout.
if(EXISTS /usr/bin/python3)
  set(CTX_CHECK_PYTHON /usr/bin/python3)
else()
  find_program(CTX_CHECK_PYTHON NAMES python3 REQUIRED)
endif()

# ctxlab_check_script(PREFIX SCRIPT WORKDIR TIMEOUT SUB...)
function(ctxlab_check_script prefix script workdir timeout)
  foreach(sub ${ARGN})
    add_test(NAME ${prefix}_${sub}
             COMMAND ${CTX_CHECK_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/${script} ${sub}
                     --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/${workdir})
    set_tests_properties(${prefix}_${sub} PROPERTIES
                         ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                         TIMEOUT ${timeout})
  endforeach()
endfunction()
