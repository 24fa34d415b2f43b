# tests/cli/study.cmake — examples/extrapolation_study.sh, the `ctxlab study` preset of the
# extrapolation study, on its --quick grid (examples/studies/extrapolation_quick.json): tiny models
# of every encoding (the survey's rnn, floater, complex-order included) trained for a few steps over
# 2 seeds, evaluated at L..8L, the RoPE scalings, the two baselines, PI / YaRN / direct fine-tunes,
# and all of it for RoPE again with a BPE tokenizer the study trains on its split (bpe_rope*). Then
# tests/python/study_checks.py checks the study directory: every cell with its label, the numbers
# finite and consistent (ppl = exp(loss), ...), equal where equal by construction, trained below
# uniform, the BPE cells on the study's tokenizer; run again, it resumes (nothing left to run).
# The wrapper's gone options (--doc, --tokenizer) fail naming their replacement; its overrides
# (--steps, --ft-steps, --plugin, --add-encoding with a plugin's encoding) reach the study's
# commands (--dry-run of the full preset). About a minute on 2 cores.
set(_st_out ${CMAKE_BINARY_DIR}/study_quick)
set(_st_sh ${CMAKE_SOURCE_DIR}/examples/extrapolation_study.sh)
add_test(NAME extrapolation_study_quick
         COMMAND sh -c "rm -rf '${_st_out}' && \
'${_st_sh}' --quick --bin '$<TARGET_FILE:ctxlab>' --out '${_st_out}' && \
for f in summary.md summary.json ppl.csv positions.csv report.html tokenizers/bpe1k.model \
  eval/bpe_rope+pi_ft/seed2.json runs/rope+pi_ft/seed1/model.safetensors; do \
  test -s '${_st_out}/'$f || { echo missing $f; exit 1; }; done && \
grep -q '^| bpe_rope + pi s=4 ft 20@4L |' '${_st_out}/summary.md' && \
'${CTX_CHECK_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/python/study_checks.py' '${_st_out}' && \
'${_st_sh}' --quick --bin '$<TARGET_FILE:ctxlab>' --out '${_st_out}' | grep -q ', 0 run now, 137 done before' && \
! '${_st_sh}' --doc x.md 2> '${_st_out}/doc.err' && grep -q 'summary.md' '${_st_out}/doc.err' && \
! '${_st_sh}' --tokenizer x.model 2> '${_st_out}/tok.err' && grep -q '\"tokenizers\"' '${_st_out}/tok.err' && \
'${_st_sh}' --bin '$<TARGET_FILE:ctxlab>' --out '${_st_out}/over' --steps 7 --ft-steps 3 \
  --plugin '$<TARGET_FILE:ctxlab_test_alias_plugin>' --add-encoding 'alias={\"type\":\"study-alias\"}' \
  --dry-run > '${_st_out}/over.txt' && grep -q 'train alias seed 3' '${_st_out}/over.txt' && \
grep -q 'ctxlab --plugin $<TARGET_FILE:ctxlab_test_alias_plugin> train --preset tiny --steps 7 --posenc {\"type\":\"study-alias\"}' '${_st_out}/over.txt' && \
grep -q -- '--preset tiny --steps 7 ' '${_st_out}/over.txt' && grep -q -- '--context 512 --rope-scaling pi --factor 4 --steps 3 ' '${_st_out}/over.txt'")
set_tests_properties(extrapolation_study_quick PROPERTIES
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE;PYTHONDONTWRITEBYTECODE=1" TIMEOUT 600)
