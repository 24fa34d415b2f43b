# tests/cli/library.cmake — ctxlab as an installed library (issue 19, docs/extending.md):
#   library_install_example  `cmake --install` of this build into a fresh prefix under the build
#       directory, then examples/custom_encoding configured against it with find_package(ctxlab),
#       built, and its own ctest run: FIRE's op and model gradchecks, training, checkpoint,
#       extrapolation, the installed CUDA module found from the prefix (CUDA builds), and
#       `ctxlab --plugin libfire.so` train / eval / gradcheck / bad plugins. Fails on any step.
# Also its own script: cmake -DBUILD=.. -DSRC=.. -DGEN=.. [-DLAUNCHER=..] -P library.cmake
if(CMAKE_SCRIPT_MODE_FILE)
  set(prefix "${BUILD}/library_test/prefix")
  set(ex "${BUILD}/library_test/example")
  file(REMOVE_RECURSE "${BUILD}/library_test")
  function(step)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      string(REPLACE ";" " " cmd "${ARGN}")
      message(FATAL_ERROR "library test: '${cmd}' failed (${rc})")
    endif()
  endfunction()
  step("${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${prefix}")
  set(launch "")
  if(LAUNCHER)
    set(launch "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
  endif()
  step("${CMAKE_COMMAND}" -S "${SRC}/examples/custom_encoding" -B "${ex}" -G "${GEN}"
       "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX}" ${launch})
  step("${CMAKE_COMMAND}" --build "${ex}" -j2)
  step("${CMAKE_CTEST_COMMAND}" --test-dir "${ex}" --output-on-failure -j2)
  return()
endif()

add_test(NAME library_install_example
         COMMAND ${CMAKE_COMMAND} -DBUILD=${CMAKE_BINARY_DIR} -DSRC=${CMAKE_SOURCE_DIR}
                 "-DGEN=${CMAKE_GENERATOR}" "-DCXX=${CMAKE_CXX_COMPILER}"
                 "-DLAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}" -P ${CMAKE_CURRENT_LIST_FILE})
set_tests_properties(library_install_example PROPERTIES TIMEOUT 600)
