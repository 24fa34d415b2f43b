# tests/cli/distributed.cmake — data-parallel training over MPI (docs/distributed.md), driven by
# tests/python/distributed_checks.py (NumPy + st_io.py). Included by CMakeLists.txt.
#   distributed_same_run_shm   mpirun -np 2 == one process after 20 steps (batch 8), shared memory
#   distributed_same_run_tcp   the same over TCP (--mca btl self,tcp: the path a multi-node run takes)
#   distributed_small_batch    --deterministic --batch 8: 1, 2 and 4 ranks give the same bits
#   distributed_resume         a run checkpointed with N = 2 resumes with N = 1 and the other way round
#   distributed_kill9          kill -9 of one rank: all end non-zero within seconds, checkpoint loads
#   distributed_stopped_rank   SIGSTOP of one rank mid-run (2 and 3 ranks): the others exit 124 after
#                              --dist-timeout, naming the stopped rank alone
#   distributed_stopped_start_end  SIGSTOP of one rank before MPI_Init, the last barrier, MPI_Finalize:
#                                  the other exits 124 after --dist-timeout, naming the operation
#   distributed_signal_one_rank  SIGINT to one rank: both stop after the same step, checkpoint, exit 130
#   distributed_bad_split      --batch 7 on 2 ranks: one clear error
#   distributed_slicing        each rank's loss is that of its own rows of the global batch
# Tiny preset; each takes 1-5 s on 2 idle cores (same_run_*: 15-18 s). OMPI_ALLOW_RUN_AS_ROOT*: CI runs as root.
find_program(CTX_MPIRUN NAMES mpirun REQUIRED)
if(EXISTS /usr/bin/python3)
  set(_dc_py /usr/bin/python3)
else()
  find_program(_dc_py NAMES python3 REQUIRED)
endif()
set(_dc_script ${CMAKE_SOURCE_DIR}/tests/python/distributed_checks.py)
set(_dc_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1")
foreach(_dc IN ITEMS "same_run_shm|same_run" "same_run_tcp|same_run;--btl;self,tcp" "small_batch|small_batch"
                     "resume|resume_across_n"
                     "kill9|kill9" "stopped_rank|stopped_rank" "stopped_start_end|stopped_start_end"
                     "signal_one_rank|signal_one_rank"
                     "bad_split|bad_split" "slicing|slicing")
  string(REPLACE "|" ";" _dc_parts "${_dc}")
  list(GET _dc_parts 0 _dc_name)
  list(REMOVE_AT _dc_parts 0)
  add_test(NAME distributed_${_dc_name}
           COMMAND ${_dc_py} ${_dc_script} ${_dc_parts} --bin $<TARGET_FILE:ctxlab> --mpirun ${CTX_MPIRUN}
                   --work ${CMAKE_BINARY_DIR}/cli_distributed/${_dc_name})
  # RUN_SERIAL: the 2 ranks of one test must not share the cores with another test's
  set_tests_properties(distributed_${_dc_name} PROPERTIES ENVIRONMENT "${_dc_env}" TIMEOUT 90 RUN_SERIAL TRUE)
endforeach()
