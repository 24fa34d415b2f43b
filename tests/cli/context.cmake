# tests/cli/context.cmake — end-to-end checks of context extension driven by
# tests/python/context_checks.py (NumPy + tests/python/st_io.py only). Included by CMakeLists.txt.
#   context_finetune   ctxlab finetune writes context + scaling (original_context kept), eval needs
#                      no flags afterwards, resume works, bad requests are one-line errors
#   context_baselines  ctxlab eval --window / --segmented
#   context_extensions llama3 / longrope fine-tunes, self-extend and sinks on eval, sinks on sample
#                      (rope and cope)
#   context_xl         Transformer-XL trains on consecutive segments with memory
# Each takes a few seconds (tiny preset).

ctxlab_check_script(context context_checks.py cli_context_checks 120 finetune baselines extensions xl)
# finetune writes and resumes checkpoints: also under ASan/UBSan in .ci/run (ctest -L asan_cli)
set_property(TEST context_finetune APPEND PROPERTY LABELS asan_cli)
