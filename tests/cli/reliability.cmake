# tests/cli/reliability.cmake — the CLI under hostile input, signals and faults (issue 34), driven
# by tests/python/reliability_checks.py; docs/reliability.md names the promise each one holds.
#   reliability_<sub>   see the docstring of reliability_checks.py
if(EXISTS /usr/bin/python3)
  set(_rel_py /usr/bin/python3)
else()
  find_program(_rel_py NAMES python3 REQUIRED)
endif()
set(_rel_script ${CMAKE_SOURCE_DIR}/tests/python/reliability_checks.py)
set(_rel_work ${CMAKE_BINARY_DIR}/cli_reliability)
# a --plugin whose factory returns nullptr (reliability_plugin); binds to the CLI's symbols
add_library(ctxlab_test_null_plugin MODULE ${CMAKE_SOURCE_DIR}/tests/tools/null_posenc_plugin.cpp)
target_include_directories(ctxlab_test_null_plugin PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
set_target_properties(ctxlab_test_null_plugin PROPERTIES PREFIX "lib" OUTPUT_NAME "null_posenc_plugin")
add_dependencies(ctxlab ctxlab_test_null_plugin)
foreach(_rel_sub injection nonfinite overwrite lock signals strict plugin escapes early limits)
  add_test(NAME reliability_${_rel_sub}
           COMMAND ${_rel_py} ${_rel_script} ${_rel_sub} --bin $<TARGET_FILE:ctxlab> --work ${_rel_work}
                   --plugin-lib $<TARGET_FILE:ctxlab_test_null_plugin>)
  set_tests_properties(reliability_${_rel_sub} PROPERTIES
                       ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1"
                       TIMEOUT 300)
endforeach()
