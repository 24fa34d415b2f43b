# tests/cli/tasks.cmake — end-to-end checks of the retrieval tasks and the per-position loss, driven
# by tests/python/task_checks.py (standard library only). Included by CMakeLists.txt.
#   tasks_eval       eval --task: table, CSV, JSON, Wilson interval, seeds, one-line errors
#   tasks_train      train --task-mix: resume bit for bit, the mix saved, one-line errors
#   tasks_positions  eval --per-position: buckets sum to the loss; rope trained at L rises past L
#   tasks_attn       eval --attn-stats: table, JSON / CSV per (length, layer, head), ranges, window, errors
#   tasks_window     train --window W: saved with the run, used by eval / sample by default, errors
#   tasks_learn      a tiny model learns copy (span 2, context 20) in 1000 steps: well above chance

ctxlab_check_script(tasks task_checks.py cli_task_checks 240 eval train positions attn window learn)
# the bad-input cases also under ASan/UBSan in .ci/run (ctest -L asan_cli)
set_property(TEST tasks_eval APPEND PROPERTY LABELS asan_cli)
