# tests/cli/bench_scripts.cmake — the benchmark scripts' arithmetic and refusals
# (tests/python/bench_checks.py): bench/roofline.py against the 6N FLOP identity and the doc,
# gpu_compare.sh / compare.sh argument handling and the no-GPU refusal, torch_peer.py's bf16 and
# --config paths. No timing. Included by CMakeLists.txt. A few seconds.
if(EXISTS /usr/bin/python3)
  set(_bs_py /usr/bin/python3)  # Debian's, with torch
else()
  find_program(_bs_py NAMES python3 REQUIRED)
endif()
add_test(NAME bench_scripts COMMAND ${_bs_py} ${CMAKE_SOURCE_DIR}/tests/python/bench_checks.py)
set_tests_properties(bench_scripts PROPERTIES
                     SKIP_RETURN_CODE 77  # only where CTXLAB_ALLOW_MISSING=torch (tests/python/deps.py)
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_WAIT_POLICY=PASSIVE"
                     TIMEOUT 120)
