# tests/cli/python.cmake — python_notebook: examples/notebook.py runs; python_types: mypy --strict over
# the package and python/tests/typecheck_usage.py; python_api: the pytest suite of the Python package (python/tests/,
# docs/python.md) against the module this build makes (BUILD/python/ctxlab, cmake/python.cmake):
# tensors and NumPy / DLPack views, models, optimizers, train / evaluate / sample, gradcheck,
# errors, and the gradients of several encodings against PyTorch autograd (tests/python/torch_ref.py).
# Where nanobind is missing (CTXLAB_PYTHON could not default ON) the test is registered all the
# same and FAILS saying why, or exits 77 (skipped) where CTXLAB_ALLOW_MISSING lists nanobind
# (tests/python/deps.py). The sanitizer, fuzzer and emulator builds make no module and no test.
set(_py_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python;CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1")
if(CTXLAB_PYTHON)
  add_test(NAME python_api
           COMMAND ${CTXLAB_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
                   --basetemp ${CMAKE_BINARY_DIR}/python_api ${CMAKE_SOURCE_DIR}/python/tests)
  set_tests_properties(python_api PROPERTIES ENVIRONMENT "${_py_env}" TIMEOUT 300 LABELS python)
  # the notebook-style example runs top to bottom (its PyTorch gradient check asserts)
  add_test(NAME python_notebook COMMAND ${CTXLAB_PYTHON_EXECUTABLE} ${CMAKE_SOURCE_DIR}/examples/notebook.py)
  set_tests_properties(python_notebook PROPERTIES ENVIRONMENT "${_py_env}" TIMEOUT 300 LABELS python)
  # mypy --strict over the built package (its generated stub included) and a typed usage file;
  # mypy missing: FAIL, or 77 where CTXLAB_ALLOW_MISSING lists mypy (tests/python/typecheck.py)
  add_test(NAME python_types
           COMMAND ${CTXLAB_PYTHON_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/python/typecheck.py
                   ${CMAKE_BINARY_DIR}/python ${CMAKE_SOURCE_DIR}/python)
  set_tests_properties(python_types PROPERTIES ENVIRONMENT "${_py_env}" TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS python)
elseif(NOT CTXLAB_NANOBIND_DIR AND NOT CTXLAB_SANITIZE AND NOT CTXLAB_FUZZ AND NOT CTXLAB_CUDA_EMULATOR)
  # deps.require fails (or, where allowed, skips) naming the interpreter; nanobind importable
  # now means it came after the configure: a re-run of cmake builds the module
  add_test(NAME python_api
           COMMAND ${CTXLAB_PYTHON_EXECUTABLE} -c "import sys; sys.path.insert(0, sys.argv[1]); import deps; \
deps.require('nanobind', 'nanobind'); print('FAIL: nanobind imports now but this build was configured \
without it: re-run cmake'); sys.exit(1)" ${CMAKE_SOURCE_DIR}/tests/python)
  set_tests_properties(python_api PROPERTIES SKIP_RETURN_CODE 77 LABELS python)
endif()
