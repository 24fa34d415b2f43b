# tests/cli/precision.cmake — the speed modes against exact fp32 (tests/python/precision_checks.py):
# `ctxlab grads --precision bf16` on the CPU for learned, rope and alibi (bf16: loss within 1e-3
# relative, every gradient within 3e-2 of its tensor's max, and one at least 2^-8 from fp32's: the
# mode is engaged); in builds with the CUDA backend also `--device cuda --precision bf16` and
# `--device cuda --tf32` (cuBLASLt; run by the emulator in CI; TF32: 8x tighter, 1.25e-4, 3.75e-3
# and 2^-11). Included by CMakeLists.txt.

if(EXISTS /usr/bin/python3)
  set(_pc_py /usr/bin/python3)
else()
  find_program(_pc_py NAMES python3 REQUIRED)
endif()
set(_pc_script ${CMAKE_SOURCE_DIR}/tests/python/precision_checks.py)
set(_pc_env "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1")
add_test(NAME precision_bf16_cpu
         COMMAND ${_pc_py} ${_pc_script} --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_precision_cpu
                 --device cpu --precision bf16 --encodings learned rope alibi)
set_tests_properties(precision_bf16_cpu PROPERTIES ENVIRONMENT "${_pc_env}" TIMEOUT 120)
if(CTXLAB_CUDA_EMULATOR OR CTXLAB_WITH_CUDA)
  add_test(NAME precision_bf16_cuda
           COMMAND ${_pc_py} ${_pc_script} --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_precision_cuda
                   --device cuda --precision bf16 --encodings learned rope alibi)
  add_test(NAME precision_tf32_cuda
           COMMAND ${_pc_py} ${_pc_script} --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/cli_precision_tf32
                   --device cuda --tf32 --encodings learned rope alibi)
  set_tests_properties(precision_bf16_cuda precision_tf32_cuda PROPERTIES
                       ENVIRONMENT "${_pc_env}" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
