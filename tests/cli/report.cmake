# tests/cli/report.cmake — `ctxlab tokenizer train`, a BPE and a byte run of a few steps, their
# eval results, and `ctxlab report` over both, opened in a real headless Chromium
# (tests/python/report_checks.py: no console errors, every chart has data, screenshot not blank).
# Plus the one-line errors of the tokenizer and report verbs. Included by CMakeLists.txt.
if(EXISTS /usr/bin/python3)
  set(_rp_py /usr/bin/python3)
else()
  find_program(_rp_py NAMES python3 REQUIRED)
endif()
set(_rp_dir ${CMAKE_BINARY_DIR}/cli_report)
set(_rp_bin $<TARGET_FILE:ctxlab>)
set(_rp_data ${CMAKE_SOURCE_DIR}/data/pride_and_prejudice.txt)
set(_rp_train "--preset tiny --data '${_rp_dir}/slice.txt' --steps 6 --batch 2 --context 32 --eval-interval 3 --eval-batches 2 --log-interval 3 --no-plot --quiet")

add_test(NAME cli_report_runs
         COMMAND sh -c "rm -rf '${_rp_dir}' && mkdir -p '${_rp_dir}' && \
head -c 60000 '${_rp_data}' > '${_rp_dir}/slice.txt' && \
'${_rp_bin}' tokenizer train --data '${_rp_dir}/slice.txt' --vocab 600 --type bpe --out '${_rp_dir}/bpe.model' && \
'${_rp_bin}' train ${_rp_train} --tokenizer '${_rp_dir}/bpe.model' --out '${_rp_dir}/bpe' && \
'${_rp_bin}' train ${_rp_train} --out '${_rp_dir}/bytes' && \
'${_rp_bin}' eval --checkpoint '${_rp_dir}/bpe/model.safetensors' --data '${_rp_dir}/slice.txt' --lengths 16,32 \
  --max-windows 8 --json '${_rp_dir}/bpe/eval.json' | grep -q 'tokenizer sentencepiece' && \
'${_rp_bin}' eval --checkpoint '${_rp_dir}/bytes/model.safetensors' --data '${_rp_dir}/slice.txt' --lengths 16,32,64 \
  --max-windows 8 --json '${_rp_dir}/bytes/eval.json' && \
'${_rp_bin}' sample --checkpoint '${_rp_dir}/bpe/model.safetensors' --prompt 'It is' --max-tokens 5 | grep -q '^It is' && \
'${_rp_bin}' report '${_rp_dir}/bpe' '${_rp_dir}/bytes' --out '${_rp_dir}/report.html'")
set_tests_properties(cli_report_runs PROPERTIES FIXTURES_SETUP report_runs
                     ENVIRONMENT "CTXLAB_THREADS=2;OMP_WAIT_POLICY=PASSIVE")

add_test(NAME report_chromium
         COMMAND ${_rp_py} ${CMAKE_SOURCE_DIR}/tests/python/report_checks.py ${_rp_dir}/report.html
                 ${_rp_dir}/chromium --expect-charts 7 --expect-diff tokenizer.type config.vocab_size)
set_tests_properties(report_chromium PROPERTIES FIXTURES_REQUIRED report_runs TIMEOUT 300 SKIP_RETURN_CODE 77)

# A mismatching --tokenizer, and bad inputs of the two verbs: exit 1 with one line naming the problem.
add_test(NAME cli_tokenizer_report_errors
         COMMAND sh -c "cd '${_rp_dir}' && \
'${_rp_bin}' tokenizer train --data slice.txt --vocab 700 --out other.model > /dev/null && \
{ ! '${_rp_bin}' eval --checkpoint bpe/model.safetensors --tokenizer other.model --lengths 16 2> e1; } && \
grep -q 'is not the tokenizer recorded in bpe/model.safetensors' e1 && test $(wc -l < e1) -eq 1 && \
{ ! '${_rp_bin}' tokenizer train --data slice.txt --vocab 100000 --out x.model 2> e2; } && \
grep -q 'Vocabulary size too high' e2 && test $(wc -l < e2) -eq 1 && test ! -e x.model && \
{ ! '${_rp_bin}' train --preset tiny --tokenizer missing.model --steps 1 2> e3; } && \
grep -q 'missing.model' e3 && test $(wc -l < e3) -eq 1 && \
{ ! '${_rp_bin}' report nowhere --out r.html 2> e4; } && grep -q 'nowhere is not a directory' e4 && \
mkdir -p empty && { ! '${_rp_bin}' report empty --out r.html 2> e5; } && grep -q 'not a run directory' e5 && \
{ ! '${_rp_bin}' report bpe 2> e6; } && grep -q 'missing required option --out' e6")
set_tests_properties(cli_tokenizer_report_errors PROPERTIES FIXTURES_REQUIRED report_runs)
