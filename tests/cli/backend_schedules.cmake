# tests/cli/backend_schedules.cmake — the CUDA backend table (tests/test_backend_ops.cpp) run
# twice under the CUDA emulator, with the threads of every block in forward order and shuffled
# (seed 7), each run writing a hash of every cuda case's output bytes (CTXLAB_BACKEND_DIGEST);
# the two files must be identical: no shared-memory race, no schedule-dependent reduction.
# Emulator build only (CTXLAB_CUDA_EMULATOR). Included by CMakeLists.txt.
if(CTXLAB_CUDA_EMULATOR)
  set(_bs_dir ${CMAKE_BINARY_DIR}/backend_schedules)
  add_test(NAME backend_schedules
           COMMAND ${CMAKE_COMMAND} -DTESTS=$<TARGET_FILE:ctxlab_tests> -DDIR=${_bs_dir}
                   -P ${CMAKE_SOURCE_DIR}/tests/backend_schedules_run.cmake)
  set_tests_properties(backend_schedules PROPERTIES ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE"
                       TIMEOUT 300)
endif()
