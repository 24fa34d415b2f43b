# tests/cli/eval_sample.cmake — CLI tests of `ctxlab eval` and `ctxlab sample` on a freshly
# initialised tiny checkpoint (learned positions, context 64). Included by CMakeLists.txt.
# Checks are chained with `sh -c`; each test names what it asserts.

set(_es_dir ${CMAKE_BINARY_DIR}/cli_eval_sample)
file(MAKE_DIRECTORY ${_es_dir})
set(_es_bin $<TARGET_FILE:ctxlab>)
set(_es_ckpt ${_es_dir}/tiny.safetensors)
set(_es_data ${CMAKE_SOURCE_DIR}/data/pride_and_prejudice.txt)

# The checkpoint every other test uses.
add_test(NAME cli_eval_sample_init
         COMMAND ${_es_bin} init --preset tiny --seed 3 --out ${_es_ckpt})
set_tests_properties(cli_eval_sample_init PROPERTIES FIXTURES_SETUP eval_sample_ckpt)

# Two lengths in one call, with --csv: exit 0, the CSV has the header and exactly two rows.
add_test(NAME cli_eval_two_lengths_csv
         COMMAND sh -c "rm -f '${_es_dir}/out.csv' && \
'${_es_bin}' eval --checkpoint '${_es_ckpt}' --data '${_es_data}' --lengths 32,64 --max-windows 4 \
  --csv '${_es_dir}/out.csv' --json '${_es_dir}/out.json' && \
head -n 1 '${_es_dir}/out.csv' | grep -qx 'length,windows,tokens,loss,ppl,bits_per_byte,bytes' && \
test $(wc -l < '${_es_dir}/out.csv') -eq 3 && \
grep -q '^32,4,128,' '${_es_dir}/out.csv' && grep -q '^64,4,256,' '${_es_dir}/out.csv' && \
grep -q '\"bits_per_byte\"' '${_es_dir}/out.json'")

# Without --data: the validation split of the shipped corpus.
add_test(NAME cli_eval_default_corpus
         COMMAND sh -c "'${_es_bin}' eval --checkpoint '${_es_ckpt}' --lengths 64 --max-windows 2 | grep -q 'validation split'")

# A learned model beyond its context (128 > 64) fails without --hierarchical, naming the fix ...
add_test(NAME cli_eval_learned_beyond_context_fails
         COMMAND sh -c "if out=$('${_es_bin}' eval --checkpoint '${_es_ckpt}' --data '${_es_data}' --lengths 64,128 \
  --max-windows 2 2>&1); then echo \"unexpected success: $out\"; exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q 'length 128' && echo \"$out\" | grep -q -- '--hierarchical'")
# ... and succeeds with it.
add_test(NAME cli_eval_learned_hierarchical
         COMMAND ${_es_bin} eval --checkpoint ${_es_ckpt} --data ${_es_data} --lengths 64,128 --max-windows 2 --hierarchical)

# RoPE scaling on a non-rope model is a clear error from the encoding registry.
add_test(NAME cli_eval_rope_scaling_on_learned_fails
         COMMAND sh -c "if out=$('${_es_bin}' eval --checkpoint '${_es_ckpt}' --data '${_es_data}' --lengths 64 \
  --rope-scaling pi --factor 2 2>&1); then exit 1; fi; echo \"$out\"; echo \"$out\" | grep -q 'scaling'")

# Bad option values fail with the option named.
add_test(NAME cli_eval_bad_lengths
         COMMAND sh -c "if out=$('${_es_bin}' eval --checkpoint '${_es_ckpt}' --lengths 32,abc 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q -- '--lengths'")

# Sampling with a seed twice gives identical, non-empty output (prompt first).
add_test(NAME cli_sample_seed_repeatable
         COMMAND sh -c "a=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --prompt 'It is a truth' --max-tokens 40 --seed 7) && \
b=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --prompt 'It is a truth' --max-tokens 40 --seed 7) && \
test \"$a\" = \"$b\" && case \"$a\" in 'It is a truth'*) exit 0;; *) exit 1;; esac")

# The KV cache and --no-cache print the same text (seeded, 100 tokens: past the tiny context of 64,
# where learned positions recompute the last 64), and the tokens/s line goes to stderr only.
add_test(NAME cli_sample_cache_matches_no_cache
         COMMAND sh -c "a=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --prompt 'It is a truth' --max-tokens 100 --seed 7 2>'${_es_dir}/err_a.txt') && \
b=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --prompt 'It is a truth' --max-tokens 100 --seed 7 --no-cache 2>'${_es_dir}/err_b.txt') && \
test \"$a\" = \"$b\" && grep -q '100 tokens in .* tokens/s (kv cache' '${_es_dir}/err_a.txt' && \
grep -q 'tokens/s (no cache' '${_es_dir}/err_b.txt' && case \"$a\" in *tokens/s*) exit 1;; esac")

# --num-samples 3: three continuations drawn in one batch (the graph-free decoder), each printed with
# its header and the prompt, the count on stderr; a model it cannot serve would name why.
add_test(NAME cli_sample_num_samples
         COMMAND sh -c "out=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --prompt 'It is a truth' --max-tokens 30 --seed 7 --num-samples 3 2>'${_es_dir}/err_n.txt') && \
test \"$(echo \"$out\" | grep -c '^--- sample [123] of 3 (seed [789]) ---$')\" = 3 && \
test \"$(echo \"$out\" | grep -c '^It is a truth')\" = 3 && \
grep -q 'sample: 3 x 30 tokens in .* tokens/s (kv cache, graph-free decoder' '${_es_dir}/err_n.txt' && \
if '${_es_bin}' sample --checkpoint '${_es_ckpt}' --num-samples 0 2>'${_es_dir}/err_0.txt'; then exit 1; fi; \
grep -q -- '--num-samples must be >= 1' '${_es_dir}/err_0.txt'")

add_test(NAME cli_sample_bad_temperature
         COMMAND sh -c "if out=$('${_es_bin}' sample --checkpoint '${_es_ckpt}' --temperature=-1 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q -- '--temperature'")

set_tests_properties(cli_eval_two_lengths_csv cli_eval_default_corpus cli_eval_learned_beyond_context_fails
                     cli_eval_learned_hierarchical cli_eval_rope_scaling_on_learned_fails cli_eval_bad_lengths
                     cli_sample_seed_repeatable cli_sample_cache_matches_no_cache cli_sample_num_samples cli_sample_bad_temperature
                     PROPERTIES FIXTURES_REQUIRED eval_sample_ckpt ENVIRONMENT "CTXLAB_THREADS=2" TIMEOUT 120)
# the bad-input cases (and the checkpoint they read) also under ASan/UBSan in .ci/run
set_property(TEST cli_eval_sample_init cli_eval_learned_beyond_context_fails cli_eval_rope_scaling_on_learned_fails
             cli_eval_bad_lengths cli_sample_bad_temperature APPEND PROPERTY LABELS asan_cli)
