# tests/cli/parity.cmake — PyTorch tests. Included by CMakeLists.txt.
#   pytorch_parity      `ctxlab grads` (loss and every gradient) against the independent
#                       reference tests/python/torch_ref.py; see tests/python/parity.py
#   pytorch_selftest_ref  the reference itself against HF, torchscale, fairseq, DeBERTa code and
#                       per-element loops (tests/python/selftest_ref.py)
#   pytorch_train_trajectory  `ctxlab train` step for step against the same run in float64
#                       PyTorch (torch_ref + torch.optim.AdamW): losses, gradient norms, learning
#                       rates and final weights of 12 steps (tests/python/trajectory_checks.py)
# All need Debian's Python with torch and numpy (scripts/setup.sh). They are always registered:
# a missing python3 or torch FAILS them (docs/testing.md); exit 77 (skipped) only where
# CTXLAB_ALLOW_MISSING=torch says this machine cannot have torch (tests/python/deps.py).
set(CTXLAB_PARITY_PYTHON /usr/bin/python3)
if(NOT EXISTS ${CTXLAB_PARITY_PYTHON})
  find_program(_pp_py NAMES python3)
  if(_pp_py)
    set(CTXLAB_PARITY_PYTHON ${_pp_py})
  else()
    set(CTXLAB_PARITY_PYTHON "")
  endif()
endif()

set(_pp_env "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1")
if(CTXLAB_PARITY_PYTHON)
  add_test(NAME pytorch_parity
           COMMAND ${CTXLAB_PARITY_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/parity.py
                   --ctxlab $<TARGET_FILE:ctxlab>
                   --workdir ${CMAKE_BINARY_DIR}/parity)
  add_test(NAME pytorch_selftest_ref
           COMMAND ${CTXLAB_PARITY_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/selftest_ref.py)
  add_test(NAME pytorch_train_trajectory
           COMMAND ${CTXLAB_PARITY_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/trajectory_checks.py
                   --bin $<TARGET_FILE:ctxlab> --work ${CMAKE_BINARY_DIR}/trajectory)
else()
  # Registered all the same, so that a machine without Python shows a failure, not nothing.
  foreach(_pp_t pytorch_parity pytorch_selftest_ref pytorch_train_trajectory)
    add_test(NAME ${_pp_t}
             COMMAND sh -c "echo '${_pp_t}: no python3 (/usr/bin/python3 or on PATH) at configure time; scripts/setup.sh installs python3-torch'; exit 1")
  endforeach()
endif()
set_tests_properties(pytorch_parity pytorch_selftest_ref pytorch_train_trajectory PROPERTIES
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_pp_env}" TIMEOUT 300 LABELS "parity")
set_tests_properties(pytorch_parity PROPERTIES TIMEOUT 600)  # ~15 s; several times that under ASan
# the parity run also goes through the ASan/UBSan build of ctxlab in .ci/run (ctest -L asan_cli)
set_property(TEST pytorch_parity APPEND PROPERTY LABELS asan_cli)
