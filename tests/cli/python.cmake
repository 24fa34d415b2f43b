# tests/cli/python.cmake — python_notebook: examples/notebook.py runs; python_types: mypy --strict over
# the package and python/tests/typecheck_usage.py; python_api: the pytest suite of the Python package (python/tests/,
# docs/python.md) against the module this build makes (BUILD/python/ctxlab, cmake/python.cmake):
# tensors and NumPy / DLPack views, models, optimizers, train / evaluate / sample, gradcheck,
# errors, and the gradients of several encodings against PyTorch autograd (tests/python/torch_ref.py).
# Where nanobind is missing (CTXLAB_PYTHON could not default ON) the test is registered all the
# same and FAILS saying why, or exits 77 (skipped) where CTXLAB_ALLOW_MISSING lists nanobind
# (tests/python/deps.py). python_cuda, in a CUDA build (real or the emulator's: CI's build-emu
# stage runs it): python/tests/test_cuda.py, the module on the 'cuda' device against 'cpu'
# (python_api leaves that file to it there; in a CPU-only build python_api runs it, and it checks
# that 'cuda' is refused with the library's message). The sanitizer and fuzzer builds make no
# module and no test.
set(_py_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python;CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1")
if(CTXLAB_CUDA_EMULATOR)
  # the emulator's initial-exec thread_local (core/cuda/emu/access.cpp) puts libctxlab_cuda.so's
  # whole TLS block into glibc's static TLS surplus when it loads; torch's libGLdispatch, imported
  # after the first use of 'cuda', then finds none left ("cannot allocate memory in static TLS
  # block"): a larger surplus (docs/python.md "Devices")
  list(APPEND _py_env "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096")
endif()
if(CTXLAB_PYTHON)
  set(_py_ignore)
  if(TARGET ctxlab_cuda)
    set(_py_ignore --ignore ${CMAKE_SOURCE_DIR}/python/tests/test_cuda.py)
    add_test(NAME python_cuda
             COMMAND ${CTXLAB_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
                     --basetemp ${CMAKE_BINARY_DIR}/python_cuda ${CMAKE_SOURCE_DIR}/python/tests/test_cuda.py)
    set_tests_properties(python_cuda PROPERTIES ENVIRONMENT "${_py_env}" TIMEOUT 300 LABELS python)
  endif()
  add_test(NAME python_api
           COMMAND ${CTXLAB_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
                   --basetemp ${CMAKE_BINARY_DIR}/python_api ${_py_ignore} ${CMAKE_SOURCE_DIR}/python/tests)
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
elseif(NOT CTXLAB_NANOBIND_DIR AND NOT CTXLAB_SANITIZE AND NOT CTXLAB_FUZZ)
  # deps.require fails (or, where allowed, skips) naming the interpreter; nanobind importable
  # now means it came after the configure: a re-run of cmake builds the module
  set(_py_missing_tests python_api)
  if(TARGET ctxlab_cuda)
    list(APPEND _py_missing_tests python_cuda)
  endif()
  foreach(_t ${_py_missing_tests})
    add_test(NAME ${_t}
             COMMAND ${CTXLAB_PYTHON_EXECUTABLE} -c "import sys; sys.path.insert(0, sys.argv[1]); import deps; \
deps.require('nanobind', 'nanobind'); print('FAIL: nanobind imports now but this build was configured \
without it: re-run cmake'); sys.exit(1)" ${CMAKE_SOURCE_DIR}/tests/python)
    set_tests_properties(${_t} PROPERTIES SKIP_RETURN_CODE 77 LABELS python)
  endforeach()
endif()
