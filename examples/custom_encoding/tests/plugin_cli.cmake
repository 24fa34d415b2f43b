# tests/plugin_cli.cmake — `ctxlab --plugin libfire.so` end to end (cmake -P; CMakeLists.txt):
#   1. train 20 steps of a tiny FIRE model: exit 0, loss at step 20 below step 1 (train.csv)
#   2. eval the checkpoint at 32 (its context), 64 and 128 tokens: exit 0, a finite perplexity
#      for each length (FIRE extrapolates: no length error)
#   3. gradcheck --encoding fire-example: exit 0 and "N passed, 0 failed" with N >= 1
#   4. bad plugins: a missing file and a plugin with an undefined symbol each give exit 1 and
#      one line naming the file; without --plugin, --posenc fire-example is an unknown type
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(rc "${rc}" PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()
set(FIRE "{\"type\":\"fire-example\",\"init_L\":32,\"mlp_width\":16}")
file(REMOVE_RECURSE "${OUT}")

# 1. train
run("${BIN}" train --plugin "${PLUGIN}" --preset tiny --posenc "${FIRE}" --steps 20 --batch 4
    --lr 3e-3 --eval-interval 0 --no-plot --quiet --out "${OUT}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ctxlab train --plugin exited with ${rc}: ${err}")
endif()
file(STRINGS "${OUT}/train.csv" lines)
set(first "")
set(last "")
foreach(line IN LISTS lines)
  if(line MATCHES "^1,([^,]+),")
    set(first "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^20,([^,]+),")
    set(last "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(first STREQUAL "" OR last STREQUAL "" OR NOT last LESS first)
  message(FATAL_ERROR "train --plugin: loss did not go down (step 1 '${first}', step 20 '${last}')")
endif()
message(STATUS "train --plugin fire: loss ${first} -> ${last}")

# 2. eval beyond the training length (the checkpoint's config names posenc "fire-example")
run("${BIN}" eval --plugin "${PLUGIN}" --checkpoint "${OUT}/model.safetensors" --lengths 32,64,128)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ctxlab eval --plugin exited with ${rc}: ${err}")
endif()
message(STATUS "${out}")
foreach(len 32 64 128)
  if(NOT out MATCHES "\n *${len} +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+")
    message(FATAL_ERROR "eval --plugin: no finite result row for length ${len}:\n${out}")
  endif()
endforeach()
run("${BIN}" eval --checkpoint "${OUT}/model.safetensors" --lengths 32)
if(rc EQUAL 0 OR NOT err MATCHES "unknown posenc.type 'fire-example'")
  message(FATAL_ERROR "eval without --plugin should fail on the unknown type 'fire-example' (rc ${rc}): ${err}")
endif()

# 3. gradcheck through a tiny f64 model
run("${BIN}" gradcheck --plugin "${PLUGIN}" --encoding fire-example --param init_L=9.5 --param init_c=0.7
    --param mlp_width=4)
message(STATUS "${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "gradcheck fire-example: ([0-9]+) passed, ([0-9]+) failed")
  message(FATAL_ERROR "gradcheck --plugin: exit ${rc}, no summary: ${out}${err}")
endif()
if(CMAKE_MATCH_1 LESS 1 OR NOT CMAKE_MATCH_2 EQUAL 0)
  message(FATAL_ERROR "gradcheck --plugin: ${CMAKE_MATCH_1} passed, ${CMAKE_MATCH_2} failed")
endif()
# the threshold's gradient is not zero (positions on both sides of L): its error is not 0.000e+00
if(NOT out MATCHES "pe\\.L_multiplier +posenc +1 +[0-9.e+-]+ +[1-9][0-9.e+-]+ +PASS" OR NOT out MATCHES "pe\\.mlp\\.fc2\\.weight +posenc")
  message(FATAL_ERROR "gradcheck --plugin: FIRE's parameters were not checked:\n${out}")
endif()

# 4. bad plugins: one line, naming the file
foreach(bad "${OUT}/no_such_plugin.so" "${BAD_PLUGIN}")
  run("${BIN}" train --plugin "${bad}" --preset tiny --steps 1)
  string(STRIP "${err}" e)
  string(FIND "${e}" "\n" nl)
  string(FIND "${e}" "ctxlab: error: --plugin ${bad}: cannot load: " at)
  if(NOT rc EQUAL 1 OR NOT nl EQUAL -1 OR NOT at EQUAL 0)
    message(FATAL_ERROR "bad plugin ${bad}: expected exit 1 and one line 'ctxlab: error: --plugin "
                        "<file>: cannot load: ...', got exit ${rc}: ${err}")
  endif()
  message(STATUS "bad plugin: ${e}")
endforeach()
if(NOT e MATCHES "undefined symbol")
  message(FATAL_ERROR "the plugin with a missing symbol: the error should say 'undefined symbol': ${e}")
endif()
