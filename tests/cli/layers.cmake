# tests/cli/layers.cmake — the build's layering check (cmake/check_layers.py) holds and rejects
# every kind of upward include (tests/python/layers_checks.py). Included by CMakeLists.txt.
add_test(NAME layering_rejects_upward_includes
         COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/python/layers_checks.py ${CMAKE_SOURCE_DIR})
set_tests_properties(layering_rejects_upward_includes PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" TIMEOUT 120)
