# tests/cli/optim.cmake — ctxlab's AdamW (reference and fused), SGD and warmup + cosine schedule
# against torch.optim and hand-computed values (tests/python/optim_checks.py), through the test
# tool tests/tools/optim_driver.cpp. Included by CMakeLists.txt. A few seconds.
add_executable(ctxlab_optim_driver ${CMAKE_SOURCE_DIR}/tests/tools/optim_driver.cpp)
ctxlab_link_lib(ctxlab_optim_driver)

if(EXISTS /usr/bin/python3)
  set(_oc_py /usr/bin/python3)  # Debian's, with torch
else()
  find_program(_oc_py NAMES python3 REQUIRED)
endif()
add_test(NAME optim_vs_torch
         COMMAND ${_oc_py} ${CMAKE_SOURCE_DIR}/tests/python/optim_checks.py
                 --driver $<TARGET_FILE:ctxlab_optim_driver> --work ${CMAKE_BINARY_DIR}/optim_checks)
set_tests_properties(optim_vs_torch PROPERTIES
                     SKIP_RETURN_CODE 77  # only where CTXLAB_ALLOW_MISSING=torch (tests/python/deps.py)
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                     TIMEOUT 120 LABELS "parity")
