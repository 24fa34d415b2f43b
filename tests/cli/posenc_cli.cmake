# tests/cli/posenc_cli.cmake — CLI tests of the positional encodings (POSENC_SPEC), one pair per
# encoding family. Included by CMakeLists.txt; also its own `cmake -P` script (below).
#   posenc_gradcheck_<name>  `ctxlab gradcheck --encoding X`: every parameter of a tiny f64 GPT
#                            (the encoding's listed separately) against central differences;
#                            exit 0 and the summary line says 0 failed
#   posenc_smoke_<name>      `ctxlab train --preset tiny --posenc X` for 30 steps: the run
#                            finishes and the loss at step 30 (train.csv) is below the loss at step 1
# Parameters are chosen so that the interesting paths run at tiny sizes: T5 / DeBERTa log
# buckets, Shaw clipping (K = 2 < T), kerple away from its clamp (the verb does that). Each
# gradcheck takes well under a second, each smoke run a few seconds on 2 threads.

# ---- script mode, gradcheck: cmake -DBIN=.. -DGRADCHECK_ARGS=a@@b@@c -P posenc_cli.cmake -----
# Passes only when `ctxlab gradcheck` exits 0 AND its summary says "N passed, 0 failed" with
# N >= 1 (an exit status alone, or a pattern alone, could pass with nothing checked).
if(CMAKE_SCRIPT_MODE_FILE AND DEFINED GRADCHECK_ARGS)
  string(REPLACE "@@" ";" GRADCHECK_ARGS "${GRADCHECK_ARGS}")
  execute_process(COMMAND "${BIN}" gradcheck ${GRADCHECK_ARGS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ctxlab gradcheck ${GRADCHECK_ARGS} exited with ${rc}")
  endif()
  if(NOT out MATCHES "gradcheck [a-z0-9-]+: ([0-9]+) passed, ([0-9]+) failed")
    message(FATAL_ERROR "ctxlab gradcheck ${GRADCHECK_ARGS}: no 'N passed, M failed' summary")
  endif()
  if(CMAKE_MATCH_1 LESS 1 OR NOT CMAKE_MATCH_2 EQUAL 0)
    message(FATAL_ERROR "ctxlab gradcheck ${GRADCHECK_ARGS}: ${CMAKE_MATCH_1} passed, "
                        "${CMAKE_MATCH_2} failed (need at least 1 passed and 0 failed)")
  endif()
  return()
endif()

# ---- script mode, smoke: cmake -DBIN=.. -DOUT=.. -DPOSENC=.. -P posenc_cli.cmake ------------
if(CMAKE_SCRIPT_MODE_FILE)
  file(REMOVE_RECURSE "${OUT}")
  execute_process(COMMAND "${BIN}" train --preset tiny --posenc "${POSENC}" --steps 30 --batch 4
                          --eval-interval 0 --no-plot --quiet --out "${OUT}"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ctxlab train --posenc ${POSENC} exited with ${rc}")
  endif()
  file(STRINGS "${OUT}/train.csv" lines)
  set(first "")
  set(last "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^1,([^,]+),")
      set(first "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^30,([^,]+),")
      set(last "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(first STREQUAL "" OR last STREQUAL "")
    message(FATAL_ERROR "${OUT}/train.csv has no row for step 1 or step 30")
  endif()
  if(NOT last LESS first)
    message(FATAL_ERROR "posenc ${POSENC}: loss did not go down: step 1 ${first}, step 30 ${last}")
  endif()
  message(STATUS "posenc ${POSENC}: loss step 1 ${first} -> step 30 ${last}")
  return()
endif()

# ---- registration ---------------------------------------------------------------------------
set(_pc_bin $<TARGET_FILE:ctxlab>)
set(_pc_dir ${CMAKE_BINARY_DIR}/cli_posenc)
file(MAKE_DIRECTORY ${_pc_dir})

# name | gradcheck arguments after --encoding | --posenc for the smoke run
set(_pc_cases
    "none|none|none"
    "learned|learned|learned"
    "learned_hierarchical|learned --param hierarchical=true|"
    "sinusoidal|sinusoidal|sinusoidal"
    "rope|rope|rope"
    "rope_interleaved|rope --param pairing=interleaved|"
    "rope_yarn|rope --param 'scaling={\"type\":\"yarn\",\"factor\":2}' --seq 9 --head-dim 8|{\"type\":\"rope\",\"scaling\":{\"type\":\"yarn\",\"factor\":2}}"
    "rope_rerope|rope --param 'scaling={\"type\":\"rerope\",\"window\":2}' --seq 7|"
    "rope_leaky_rerope|rope --param 'scaling={\"type\":\"leaky-rerope\",\"window\":2,\"factor\":4}' --seq 7|"
    "rope_llama3|rope --param 'scaling={\"type\":\"llama3\",\"factor\":4,\"original_context\":4}' --seq 9 --head-dim 8|{\"type\":\"rope\",\"scaling\":{\"type\":\"llama3\",\"factor\":4}}"
    "rope_longrope|rope --param 'scaling={\"type\":\"longrope\",\"original_context\":4,\"short_factor\":[1,2],\"long_factor\":[3,5]}' --seq 9|"
    "rope_self_extend|rope --param 'scaling={\"type\":\"self-extend\",\"window\":3,\"group\":2}' --seq 9|"
    "rope_sinks|rope --seq 9 --window 3 --sinks 2|"
    "alibi_sinks|alibi --seq 9 --window 3 --sinks 2|"
    "t5_sinks|t5 --param num_buckets=4 --param max_distance=5 --seq 9 --window 3 --sinks 2|"
    "xpos|xpos --param scale_base=4|xpos"
    "alibi|alibi --heads 3|alibi"
    "kerple|kerple|kerple"
    "kerple_power|kerple --param variant=power|"
    "sandwich|sandwich|sandwich"
    "t5|t5 --param num_buckets=4 --param max_distance=5|t5"
    "shaw|shaw --param max_relative_position=2|shaw"
    "xl|xl|xl"
    "deberta|deberta --param position_buckets=4 --param max_relative_positions=6|deberta"
    "tupe|tupe|tupe"
    "rnn|rnn|rnn"
    "floater|floater --param hidden=5 --param dt=0.3 --param substeps=2|floater"
    "complex_order|complex-order|complex-order"
    "fire|fire --param init_L=3|{\"type\":\"fire\",\"init_L\":32}"
    "fire_shared|fire --param shared=true --param init_L=2.5 --param init_c=0.7|"
    "cope|cope|cope"
    "cope_clamped|cope --param npos_max=3 --param shared=true|"
    "cope_sinks|cope --param npos_max=4 --seq 9 --window 3 --sinks 2|")

set(_pc_tests "")
foreach(_pc_case IN LISTS _pc_cases)
  string(REPLACE "|" ";" _pc_f "${_pc_case}")
  list(GET _pc_f 0 _pc_name)
  list(GET _pc_f 1 _pc_gc)
  list(LENGTH _pc_f _pc_n)
  set(_pc_smoke "")
  if(_pc_n GREATER 2)
    list(GET _pc_f 2 _pc_smoke)
  endif()
  separate_arguments(_pc_gc_args UNIX_COMMAND "${_pc_gc}")
  # the arguments travel as one string joined by "@@" (script mode splits it again)
  string(REPLACE ";" "@@" _pc_gc_joined "--encoding;${_pc_gc_args}")
  add_test(NAME posenc_gradcheck_${_pc_name}
           COMMAND ${CMAKE_COMMAND} -DBIN=${_pc_bin} "-DGRADCHECK_ARGS=${_pc_gc_joined}"
                   -P ${CMAKE_CURRENT_LIST_FILE})
  list(APPEND _pc_tests posenc_gradcheck_${_pc_name})
  if(NOT _pc_smoke STREQUAL "")
    add_test(NAME posenc_smoke_${_pc_name}
             COMMAND ${CMAKE_COMMAND} -DBIN=${_pc_bin} -DOUT=${_pc_dir}/${_pc_name} -DPOSENC=${_pc_smoke}
                     -P ${CMAKE_CURRENT_LIST_FILE})
    list(APPEND _pc_tests posenc_smoke_${_pc_name})
  endif()
endforeach()

# An unknown encoding is the registry's one-line error listing the valid names.
add_test(NAME posenc_gradcheck_unknown_encoding
         COMMAND sh -c "if out=$('${_pc_bin}' gradcheck --encoding nope 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q \"unknown posenc.type 'nope'\" && echo \"$out\" | grep -q 'alibi, complex-order, cope, deberta'")
list(APPEND _pc_tests posenc_gradcheck_unknown_encoding)

set_tests_properties(${_pc_tests} PROPERTIES
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 60)
