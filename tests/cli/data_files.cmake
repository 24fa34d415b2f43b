# tests/cli/data_files.cmake — the data files --data accepts, end to end, driven by
# tests/python/data_checks.py (standard library only). Included by CMakeLists.txt.
#   data_train  nanoGPT .bin / llm.c shard / JSONL / two files train to the text file's losses bit
#               for bit; --val-data; the one-line errors (no --vocab, a token past it, bad headers)
#   data_verbs  eval on a .bin with the run's checkpoint; tokenizer train on JSONL

ctxlab_check_script(data data_checks.py cli_data_checks 240 train verbs)
# the bad-input cases also under ASan/UBSan in .ci/run (ctest -L asan_cli)
set_property(TEST data_train APPEND PROPERTY LABELS asan_cli)
