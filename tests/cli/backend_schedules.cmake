# tests/cli/backend_schedules.cmake — the CUDA backend table (tests/test_backend_ops.cpp) under the
# CUDA emulator (CTXLAB_CUDA_EMULATOR builds only; script: tests/backend_schedules_run.cmake).
#   backend_schedules: three runs, the threads of every block in forward order, reversed and
#     shuffled (seed 7), each writing a hash of every cuda case's output bytes
#     (CTXLAB_BACKEND_DIGEST); the three files must be identical: no shared-memory race that a
#     schedule shows, no schedule-dependent reduction.
#   backend_racecheck: the table and BackendOpsEmu.* once with the race detector on
#     (CTXLAB_EMU_RACECHECK=1, core/cuda/emu/README.md): no hazard, no out-of-bounds access.
#     Not in sanitizer builds, whose kernels have no access hooks.
# Included by CMakeLists.txt.
if(CTXLAB_CUDA_EMULATOR)
  set(_bs_dir ${CMAKE_BINARY_DIR}/backend_schedules)
  add_test(NAME backend_schedules
           COMMAND ${CMAKE_COMMAND} -DTESTS=$<TARGET_FILE:ctxlab_tests> -DDIR=${_bs_dir}
                   -P ${CMAKE_SOURCE_DIR}/tests/backend_schedules_run.cmake)
  set_tests_properties(backend_schedules PROPERTIES ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE"
                       TIMEOUT 300)
  if(CTX_EMU_ACCESS_HOOKS)
    add_test(NAME backend_racecheck
             COMMAND ${CMAKE_COMMAND} -DTESTS=$<TARGET_FILE:ctxlab_tests> -DDIR=${CMAKE_BINARY_DIR}/backend_racecheck
                     -DMODE=racecheck -P ${CMAKE_SOURCE_DIR}/tests/backend_schedules_run.cmake)
    set_tests_properties(backend_racecheck PROPERTIES ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE"
                         TIMEOUT 300)
  endif()
endif()
