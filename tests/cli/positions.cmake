# tests/cli/positions.cmake — CLI tests of explicit and randomized positions (POSENC_SPEC §7.3).
# Included by CMakeLists.txt; checks are chained with `sh -c`, each test names what it asserts.
#   cli_randomized_train_eval_longer  train a few steps with "randomized": M (rope, learned), then
#       eval at M = 4x the context: exit 0 and a loss row (learned: its table has M rows); the
#       same --seed gives the same losses; rope's step-1 loss differs from the plain rope run's
#       (same init: only the drawn positions differ)
#   cli_randomized_resume_exact       --stop-after 3 then --resume gives the losses of the straight
#       run to the last digit of metrics.jsonl (the sampler's RNG is saved with the optimizer state)
#   cli_gradcheck_positions_*         `gradcheck --positions` at gapped per-row positions (f64)
#   cli_randomized_errors             M < context and sinks + positions are one-line errors

set(_po_dir ${CMAKE_BINARY_DIR}/cli_positions)
file(MAKE_DIRECTORY ${_po_dir})
set(_po_bin $<TARGET_FILE:ctxlab>)
set(_po_train "--preset tiny --steps 4 --batch 2 --seed 5 --eval-interval 0 --no-plot --quiet")

add_test(NAME cli_randomized_train_eval_longer
         COMMAND sh -c "set -e; cd '${_po_dir}'; rm -rf rl rr rr2 rp; \
'${_po_bin}' train ${_po_train} --posenc '{\"type\":\"learned\",\"randomized\":256}' --out rl; \
'${_po_bin}' eval --checkpoint rl/model.safetensors --lengths 256 --max-windows 2 | grep -Eq '^ +256 +2 +512 '; \
'${_po_bin}' train ${_po_train} --posenc '{\"type\":\"rope\",\"randomized\":256}' --out rr; \
'${_po_bin}' train ${_po_train} --posenc '{\"type\":\"rope\",\"randomized\":256}' --out rr2; \
'${_po_bin}' train ${_po_train} --posenc rope --out rp; \
'${_po_bin}' eval --checkpoint rr/model.safetensors --lengths 256 --max-windows 2 | grep -Eq '^ +256 +2 +512 '; \
test \"$(grep -o '\"loss\":[^,]*' rr/metrics.jsonl)\" = \"$(grep -o '\"loss\":[^,]*' rr2/metrics.jsonl)\"; \
test \"$(sed -n 2p rr/train.csv | cut -d, -f2)\" != \"$(sed -n 2p rp/train.csv | cut -d, -f2)\"")

add_test(NAME cli_randomized_resume_exact
         COMMAND sh -c "set -e; cd '${_po_dir}'; rm -rf s1 s2; P='{\"type\":\"rope\",\"randomized\":256}'; \
'${_po_bin}' train ${_po_train} --steps 6 --posenc \"$P\" --out s1; \
'${_po_bin}' train ${_po_train} --steps 6 --posenc \"$P\" --out s2 --stop-after 3; \
'${_po_bin}' train --resume s2 --quiet --no-plot; \
test $(grep -c '\"loss\"' s2/metrics.jsonl) -eq 6; \
test \"$(grep -o '\"loss\":[^,]*' s1/metrics.jsonl)\" = \"$(grep -o '\"loss\":[^,]*' s2/metrics.jsonl)\"")

add_test(NAME cli_gradcheck_positions_rope_per_row
         COMMAND ${CMAKE_COMMAND} -DBIN=${_po_bin}
                 "-DGRADCHECK_ARGS=--encoding@@rope@@--param@@scaling={\"type\":\"yarn\",\"factor\":4}@@--seq@@4@@--head-dim@@8@@--positions@@0,3,4,9/2,5,11,12"
                 -P ${CMAKE_SOURCE_DIR}/tests/cli/posenc_cli.cmake)
add_test(NAME cli_gradcheck_positions_fire
         COMMAND ${CMAKE_COMMAND} -DBIN=${_po_bin}
                 "-DGRADCHECK_ARGS=--encoding@@fire@@--param@@init_L=3@@--seq@@5@@--positions@@0,3,4,9,17"
                 -P ${CMAKE_SOURCE_DIR}/tests/cli/posenc_cli.cmake)
add_test(NAME cli_gradcheck_positions_learned
         COMMAND ${CMAKE_COMMAND} -DBIN=${_po_bin}
                 "-DGRADCHECK_ARGS=--encoding@@learned@@--seq@@4@@--positions@@1,2,6,9/0,4,5,7"
                 -P ${CMAKE_SOURCE_DIR}/tests/cli/posenc_cli.cmake)

add_test(NAME cli_randomized_errors
         COMMAND sh -c "cd '${_po_dir}'; rm -rf bad; \
if out=$('${_po_bin}' train ${_po_train} --posenc '{\"type\":\"rope\",\"randomized\":32}' --out bad 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q \"posenc.randomized' must be an integer M with context (64) <= M\" || exit 1; \
if out=$('${_po_bin}' gradcheck --encoding alibi --seq 4 --window 2 --sinks 1 --positions 0,3,4,9 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q 'explicit positions cannot be combined with --sinks' || exit 1; \
if out=$('${_po_bin}' gradcheck --encoding rope --seq 4 --positions 0,3,3,9 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q 'strictly increasing'")

set_tests_properties(cli_randomized_train_eval_longer cli_randomized_resume_exact cli_gradcheck_positions_rope_per_row
                     cli_gradcheck_positions_fire cli_gradcheck_positions_learned cli_randomized_errors
                     PROPERTIES ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 120)
