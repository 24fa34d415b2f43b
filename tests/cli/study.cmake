# tests/cli/study.cmake — the extrapolation study's --quick mode (examples/extrapolation_study.sh):
# tiny models of every encoding (the survey's rnn, floater, complex-order included) trained for a
# few steps, evaluated at L..8L, RoPE scalings, PI and
# direct fine-tunes, and the report with its tables and plots (gnuplot is required: scripts/setup.sh
# installs it). Then tests/python/study_checks.py checks the numbers: finite, consistent
# (ppl = exp(loss), ...), equal where equal by construction, trained below uniform. About a
# minute on 2 cores.
if(EXISTS /usr/bin/python3)
  set(_st_py /usr/bin/python3)
else()
  find_program(_st_py NAMES python3 REQUIRED)
endif()
add_test(NAME extrapolation_study_quick
         COMMAND sh -c "rm -rf '${CMAKE_BINARY_DIR}/study_quick' && \
'${CMAKE_SOURCE_DIR}/examples/extrapolation_study.sh' --quick --bin '$<TARGET_FILE:ctxlab>' \
  --out '${CMAKE_BINARY_DIR}/study_quick' && \
r='${CMAKE_BINARY_DIR}/study_quick/extrapolation.md' && \
grep -q '^| ALiBi |' \"$r\" && grep -q '^| GRU before the blocks (rnn) |' \"$r\" && \
grep -q '^| FLOATER (RK4 ODE) |' \"$r\" && grep -q '^| complex-order |' \"$r\" && grep -q '^| PI (s = len/L) |' \"$r\" && grep -q 'PI s = 4 + 20 fine-tune steps' \"$r\" && \
grep -q 'expected shape' \"$r\" && \
for f in eval/alibi.csv eval/rnn.csv eval/floater.csv eval/complex-order.csv eval/rope_yarn.csv eval/rope_pi_ft.csv rope_pi_ft/model.safetensors; do \
  test -s '${CMAKE_BINARY_DIR}/study_quick/'$f || { echo missing $f; exit 1; }; done && \
{ test -s '${CMAKE_BINARY_DIR}/study_quick/extrapolation.png' || \
  { echo \",$CTXLAB_ALLOW_MISSING,\" | grep -q ',gnuplot,' && \
    echo 'study: no extrapolation.png: gnuplot missing, allowed by CTXLAB_ALLOW_MISSING'; }; } && \
'${_st_py}' '${CMAKE_SOURCE_DIR}/tests/python/study_checks.py' '${CMAKE_BINARY_DIR}/study_quick'")
set_tests_properties(extrapolation_study_quick PROPERTIES
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 600)
