# tests/cli/study_verb.cmake — `ctxlab study` end to end, driven by tests/python/study_verb_checks.py
# (standard library only). Included by CMakeLists.txt.
#   study_verb_run     examples/studies/quick.json interrupted (--max-jobs), resumed, held to an
#                      uninterrupted run; the summary recomputed from the eval files (~25 s)
#   study_verb_errors  bad study files (bad "finetunes" too), another study in the same --out, a failing job: one-line errors
#   study_verb_finetune fine-tune cells: trained once per base, fine-tuned, evaluated, labelled, resumed

ctxlab_check_script(study_verb study_verb_checks.py cli_study_verb 300 run errors finetune)
set_property(TEST study_verb_errors APPEND PROPERTY LABELS asan_cli)
# the study's page in headless Chromium: 4 charts (ppl with bands, per-position at 3 lengths)
set_tests_properties(study_verb_run PROPERTIES FIXTURES_SETUP study_verb_page)
add_test(NAME study_verb_report_chromium
         COMMAND ${CTX_CHECK_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/report_checks.py
                 ${CMAKE_BINARY_DIR}/cli_study_verb/run/straight/report.html ${CMAKE_BINARY_DIR}/cli_study_verb/chromium
                 --expect-charts 4)
set_tests_properties(study_verb_report_chromium PROPERTIES FIXTURES_REQUIRED study_verb_page TIMEOUT 300
                     SKIP_RETURN_CODE 77)
