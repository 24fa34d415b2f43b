# cmake/python.cmake — decides whether this build makes the Python module (python/, docs/python.md).
# Included before the library's layers: the module is a shared object, so with CTXLAB_PYTHON ON
# every object of the library is compiled position-independent (-fPIC, with
# -fno-semantic-interposition so calls inside the library stay direct and inlinable, as in the
# PIE executables; the CLI links the same objects).
#   CTXLAB_PYTHON_EXECUTABLE  the interpreter the module is built for and the pytest suite runs
#       with: the project venv scripts/setup.sh makes (~/.cache/ctxlab/py-venv: Debian's python3
#       with its system packages, torch and numpy among them, plus nanobind from PyPI), else
#       /usr/bin/python3. pip install ./python (scikit-build-core) passes its own.
#   CTXLAB_PYTHON  ON by default when that interpreter has nanobind, except in the sanitizer and
#       fuzzer builds (which test the library, not the module). The CUDA-emulator build makes it:
#       ctest python_cuda runs the module on the emulated device there (.ci/run).
if(SKBUILD)
  set(_py_exe_default "${Python_EXECUTABLE}")
elseif(DEFINED ENV{XDG_CACHE_HOME} AND EXISTS "$ENV{XDG_CACHE_HOME}/ctxlab/py-venv/bin/python")
  set(_py_exe_default "$ENV{XDG_CACHE_HOME}/ctxlab/py-venv/bin/python")
elseif(EXISTS "$ENV{HOME}/.cache/ctxlab/py-venv/bin/python")
  set(_py_exe_default "$ENV{HOME}/.cache/ctxlab/py-venv/bin/python")
else()
  set(_py_exe_default /usr/bin/python3)
endif()
set(CTXLAB_PYTHON_EXECUTABLE "${_py_exe_default}" CACHE FILEPATH
    "Python the ctxlab module is built for and its tests run with (default: scripts/setup.sh's venv)")

set(CTXLAB_NANOBIND_DIR "")
if(CTXLAB_PYTHON_EXECUTABLE)
  execute_process(COMMAND "${CTXLAB_PYTHON_EXECUTABLE}" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE CTXLAB_NANOBIND_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _nb_rc ERROR_QUIET)
  if(NOT _nb_rc EQUAL 0)
    set(CTXLAB_NANOBIND_DIR "")
  endif()
endif()
if(CTXLAB_NANOBIND_DIR AND NOT CTXLAB_SANITIZE AND NOT CTXLAB_FUZZ)
  set(_py_default ON)
else()
  set(_py_default OFF)
endif()
option(CTXLAB_PYTHON "Build the Python module ctxlab (nanobind; default ON when nanobind is found)" ${_py_default})
if(CTXLAB_PYTHON)
  if(NOT CTXLAB_NANOBIND_DIR)
    message(FATAL_ERROR "CTXLAB_PYTHON is ON but '${CTXLAB_PYTHON_EXECUTABLE} -m nanobind --cmake_dir' failed: "
                        "run scripts/setup.sh (it pip-installs nanobind into ~/.cache/ctxlab/py-venv), or "
                        "configure with -DCTXLAB_PYTHON=OFF")
  endif()
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
  message(STATUS "ctxlab: Python module ON (${CTXLAB_PYTHON_EXECUTABLE}, nanobind ${CTXLAB_NANOBIND_DIR})")
else()
  message(STATUS "ctxlab: Python module OFF (no nanobind for ${CTXLAB_PYTHON_EXECUTABLE}; scripts/setup.sh installs it)")
endif()
