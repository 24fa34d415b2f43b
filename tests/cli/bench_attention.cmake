# tests/cli/bench_attention.cmake — scripts/gpu_check.sh's `attention` section, dry on the emulated
# device (CTXLAB_CUDA_EMULATOR builds only): bench_attention_tc times the tensor-core kernels at two
# tiny shapes and appends its JSON lines, bench/attention_table.py makes the section's table of
# them (no peer here: its columns stay empty), and the table must have both shapes' rows with a
# ctxlab figure and no peer's. Every step's exit status counts (&&). The speed itself is measured
# on a GPU only. Included by CMakeLists.txt.
if(CTXLAB_CUDA_EMULATOR)
  set(_ba_json ${CMAKE_BINARY_DIR}/bench_attention_tc_emu.jsonl)
  set(_ba_md ${CMAKE_BINARY_DIR}/bench_attention_tc_emu.md)
  add_test(NAME bench_attention_tc_emu
           COMMAND sh -c "rm -f '${_ba_json}' && '$<TARGET_FILE:bench_attention_tc>' --seqlens 64,128 --tokens 128 \
--heads 1 --repeats 1 --calls 1 --json '${_ba_json}' && '${CTX_CHECK_PYTHON}' \
'${CMAKE_SOURCE_DIR}/bench/attention_table.py' '${_ba_json}' >'${_ba_md}' && cat '${_ba_md}' && \
grep -Eq '^[|] [(]2, 1, 64, 64[)] [|] [0-9.e-]+ [|] - [|] - [|]' '${_ba_md}' && \
grep -Eq '^[|] [(]1, 1, 128, 64[)] [|] [0-9.e-]+ [|] - [|] - [|]' '${_ba_md}'")
  set_tests_properties(bench_attention_tc_emu PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1" TIMEOUT 120)
endif()
