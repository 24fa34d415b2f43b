# tests/cli/context.cmake — end-to-end checks of context extension driven by
# tests/python/context_checks.py (NumPy + tests/python/st_io.py only). Included by CMakeLists.txt.
#   context_finetune   ctxlab finetune writes context + scaling (original_context kept), eval needs
#                      no flags afterwards, resume works, bad requests are one-line errors
#   context_baselines  ctxlab eval --window / --segmented
#   context_extensions llama3 / longrope fine-tunes, self-extend and sinks on eval, sinks on sample
#   context_xl         Transformer-XL trains on consecutive segments with memory
# Each takes a few seconds (tiny preset).

if(EXISTS /usr/bin/python3)
  set(_cc_py /usr/bin/python3)
else()
  find_program(_cc_py NAMES python3 REQUIRED)
endif()
foreach(_cc_sub finetune baselines extensions xl)
  add_test(NAME context_${_cc_sub}
           COMMAND ${_cc_py} ${CMAKE_SOURCE_DIR}/tests/python/context_checks.py ${_cc_sub}
                   --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_context_checks)
  set_tests_properties(context_${_cc_sub} PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                       TIMEOUT 120)
endforeach()
# finetune writes and resumes checkpoints: also under ASan/UBSan in .ci/run (ctest -L asan_cli)
set_property(TEST context_finetune APPEND PROPERTY LABELS asan_cli)
