# tests/cli/train_checks.cmake — end-to-end checks of `ctxlab train` driven by
# tests/python/train_checks.py (NumPy + tests/python/st_io.py only). Included by CMakeLists.txt.
#   train_resume          --stop-after + --resume is bit-identical to an uninterrupted run (AdamW
#                         and SGD); --accum 2 x batch 4 matches batch 8
#   train_kill9           SIGKILL at each point of a checkpoint write (CTXLAB_TEST_KILL_AT): the
#                         checkpoint that point implies, loadable, resumed bit for bit
#   train_badinput        bad configs / checkpoints / token files / options: one-line errors naming
#                         the file and field, existing outputs untouched
#   train_checkpoints     F64 / F16 / BF16 checkpoint tensors converted (MODEL_SPEC §5)
#   train_main_job_smoke  the main job in miniature: all outputs written, the loss goes down
#   train_bench           `ctxlab bench`: a self-consistent JSON, --json, --profile, refusals
# Every test uses the tiny preset and a few steps; each takes 1-12 s on 2 idle cores
# (kill9 the longest), well under a minute on 2 loaded ones.

if(EXISTS /usr/bin/python3)
  set(_tc_py /usr/bin/python3)  # Debian's, with NumPy
else()
  find_program(_tc_py NAMES python3 REQUIRED)
endif()
set(_tc_script ${CMAKE_SOURCE_DIR}/tests/python/train_checks.py)
set(_tc_work ${CMAKE_BINARY_DIR}/cli_train_checks)

foreach(_tc_sub resume kill9 badinput checkpoints main_job_smoke bench)
  add_test(NAME train_${_tc_sub}
           COMMAND ${_tc_py} ${_tc_script} ${_tc_sub} --bin $<TARGET_FILE:ctxlab> --work ${_tc_work})
  set_tests_properties(train_${_tc_sub} PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                       TIMEOUT 300)  # seconds normally; several times that under ASan (asan_cli)
endforeach()
# .ci/run runs these once more on the ASan/UBSan build (ctest -L asan_cli): the bad-input,
# checkpoint, kill -9 and resume paths of the CLI under the sanitizers.
set_property(TEST train_resume train_kill9 train_badinput train_checkpoints APPEND PROPERTY LABELS asan_cli)
