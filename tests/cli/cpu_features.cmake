# tests/cli/cpu_features.cmake — the bf16 tests as they run on a CPU without avx512_bf16, on any
# CPU: CTXLAB_NO_AVX512_BF16=1 (docs/settings.md) hides the feature, so --precision bf16 must be
# refused with its note (tests/test_util.h, cpu_runs_bf16_else_check_refusal) and the AVX-512 bf16
# kernels must decline (Bf16.Avx512KernelEqualsPortableBitForBit, Gemv.Bf16KernelMatchesReference).
# Included by CMakeLists.txt.
add_test(NAME bf16_refused_without_avx512_bf16
         COMMAND ctxlab_tests --gtest_brief=1
                 --gtest_filter=Bf16.*:Bf16Copy.*:Gemv.*:KVCacheTest.Bf16DecodeConvertsEachWeightOnce)
set_tests_properties(bf16_refused_without_avx512_bf16 PROPERTIES
                     ENVIRONMENT "CTXLAB_NO_AVX512_BF16=1;CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 300)
