# tests/cli/study_verb.cmake — `ctxlab study` end to end, driven by tests/python/study_verb_checks.py
# (standard library only). Included by CMakeLists.txt.
#   study_verb_run     examples/studies/quick.json interrupted (--max-jobs), resumed, held to an
#                      uninterrupted run; the summary recomputed from the eval files (~25 s)
#   study_verb_errors  every shipped preset plans (--dry-run); bad study files (bad "finetunes" and
#                      "tokenizers" too), another
#                      study in the same --out, a failing job: one-line errors
#   study_verb_finetune fine-tune cells: trained once per base, fine-tuned, evaluated, labelled, resumed
#   study_verb_tokenizers "tokenizers": byte and BPE runs in one grid, the tokenizer trained on the
#                      training split first, the BPE cells evaluated with it, resumed
#   study_verb_plugin  `ctxlab --plugin LIB study`: the jobs load the plugin too (an encoding of its own)

ctxlab_check_script(study_verb study_verb_checks.py cli_study_verb 300 run errors finetune tokenizers)
set_property(TEST study_verb_errors APPEND PROPERTY LABELS asan_cli)
# the study's page in headless Chromium: 4 charts (ppl with bands, per-position at 3 lengths)
set_tests_properties(study_verb_run PROPERTIES FIXTURES_SETUP study_verb_page)
add_test(NAME study_verb_report_chromium
         COMMAND ${CTX_CHECK_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/report_checks.py
                 ${CMAKE_BINARY_DIR}/cli_study_verb/run/straight/report.html ${CMAKE_BINARY_DIR}/cli_study_verb/chromium
                 --expect-charts 4)
set_tests_properties(study_verb_report_chromium PROPERTIES FIXTURES_REQUIRED study_verb_page TIMEOUT 300
                     SKIP_RETURN_CODE 77)
# --plugin passed on to the study's jobs: an encoding registered by a plugin (study-alias) trained,
# fine-tuned and evaluated by child processes
add_library(ctxlab_test_alias_plugin MODULE ${CMAKE_SOURCE_DIR}/tests/tools/alias_posenc_plugin.cpp)
target_include_directories(ctxlab_test_alias_plugin PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
set_target_properties(ctxlab_test_alias_plugin PROPERTIES PREFIX "lib" OUTPUT_NAME "alias_posenc_plugin")
add_dependencies(ctxlab ctxlab_test_alias_plugin)
add_test(NAME study_verb_plugin
         COMMAND ${CTX_CHECK_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/study_verb_checks.py plugin
                 --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_study_verb
                 --plugin-lib $<TARGET_FILE:ctxlab_test_alias_plugin>)
set_tests_properties(study_verb_plugin PROPERTIES
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1" TIMEOUT 300)
