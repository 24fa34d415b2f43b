# tests/cli/data_files.cmake — the data files --data accepts, end to end, driven by
# tests/python/data_checks.py (standard library only). Included by CMakeLists.txt.
#   data_train  nanoGPT .bin / llm.c shard / JSONL / two files train to the text file's losses bit
#               for bit; --val-data; the one-line errors (no --vocab, a token past it, bad headers)
#   data_verbs  eval on a .bin with the run's checkpoint; tokenizer train on JSONL

if(EXISTS /usr/bin/python3)
  set(_df_py /usr/bin/python3)
else()
  find_program(_df_py NAMES python3 REQUIRED)
endif()
foreach(_df_sub train verbs)
  add_test(NAME data_${_df_sub}
           COMMAND ${_df_py} ${CMAKE_SOURCE_DIR}/tests/python/data_checks.py ${_df_sub}
                   --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_data_checks)
  set_tests_properties(data_${_df_sub} PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                       TIMEOUT 240)
endforeach()
# the bad-input cases also under ASan/UBSan in .ci/run (ctest -L asan_cli)
set_property(TEST data_train APPEND PROPERTY LABELS asan_cli)
