# tests/cli/parity.cmake — PyTorch parity of `ctxlab grads` (loss and every gradient) against
# the independent reference tests/python/torch_ref.py; see tests/python/parity.py.
# Needs Debian's Python with torch and numpy; exits 77 (skipped) when torch is missing.
set(CTXLAB_PARITY_PYTHON /usr/bin/python3)
if(EXISTS ${CTXLAB_PARITY_PYTHON})
  add_test(NAME pytorch_parity
           COMMAND ${CTXLAB_PARITY_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/parity.py
                   --ctxlab $<TARGET_FILE:ctxlab>
                   --workdir ${CMAKE_BINARY_DIR}/parity)
  set_tests_properties(pytorch_parity PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
else()
  message(STATUS "ctxlab: ${CTXLAB_PARITY_PYTHON} not found, pytorch_parity not registered")
endif()
