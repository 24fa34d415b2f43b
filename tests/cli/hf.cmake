# tests/cli/hf.cmake — CLI tests of `ctxlab export --format hf` and `ctxlab import --format hf`
# (docs/huggingface.md; the layouts themselves are tested in tests/test_hf.cpp). Included by
# CMakeLists.txt. Checks are chained with `sh -c`; each test names what it asserts.

set(_hf_dir ${CMAKE_BINARY_DIR}/cli_hf)
file(MAKE_DIRECTORY ${_hf_dir})
set(_hf_bin $<TARGET_FILE:ctxlab>)
set(_hf_data ${CMAKE_SOURCE_DIR}/data/pride_and_prejudice.txt)

# --help of both verbs teaches the layouts and gives an example.
add_test(NAME cli_hf_help
         COMMAND sh -c "'${_hf_bin}' export --help | grep -q GPT2LMHeadModel && \
'${_hf_bin}' export --help | grep -q 'examples:' && '${_hf_bin}' import --help | grep -q SwiGLU && \
'${_hf_bin}' --help | grep -q '^  export '")

# init -> export -> import: the directory has transformers' files, and the imported checkpoint
# evaluates to exactly the same CSV as the original.
add_test(NAME cli_hf_export_import_same_eval
         COMMAND sh -c "rm -rf '${_hf_dir}/rt' && \
'${_hf_bin}' init --preset tiny --seed 5 --out '${_hf_dir}/a.safetensors' && \
'${_hf_bin}' export --checkpoint '${_hf_dir}/a.safetensors' --format hf '${_hf_dir}/rt' | grep -q GPT2LMHeadModel && \
test -s '${_hf_dir}/rt/config.json' && test -s '${_hf_dir}/rt/model.safetensors' && test -s '${_hf_dir}/rt/tokenizer.json' && \
grep -q '\"model_type\": \"gpt2\"' '${_hf_dir}/rt/config.json' && \
'${_hf_bin}' import --format hf '${_hf_dir}/rt' --out '${_hf_dir}/b.safetensors' | grep -q 'tokenizer bytes' && \
'${_hf_bin}' eval --checkpoint '${_hf_dir}/a.safetensors' --data '${_hf_data}' --lengths 64 --max-windows 2 --csv '${_hf_dir}/a.csv' >/dev/null && \
'${_hf_bin}' eval --checkpoint '${_hf_dir}/b.safetensors' --data '${_hf_data}' --lengths 64 --max-windows 2 --csv '${_hf_dir}/b.csv' >/dev/null && \
cmp '${_hf_dir}/a.csv' '${_hf_dir}/b.csv'")

# The committed transformers fixture imports and evaluates (context 32).
add_test(NAME cli_hf_import_transformers_fixture
         COMMAND sh -c "'${_hf_bin}' import --format hf '${CMAKE_SOURCE_DIR}/tests/data/hf/gpt2_tiny' \
--out '${_hf_dir}/fixture.safetensors' && '${_hf_bin}' eval --checkpoint '${_hf_dir}/fixture.safetensors' \
--data '${_hf_data}' --lengths 32 --max-windows 2 | grep -q ppl")

# What does not map is refused naming the field, and nothing is written.
add_test(NAME cli_hf_export_refuses_alibi
         COMMAND sh -c "rm -rf '${_hf_dir}/alibi' && \
'${_hf_bin}' init --preset tiny --posenc alibi --out '${_hf_dir}/alibi.safetensors' && \
if out=$('${_hf_bin}' export --checkpoint '${_hf_dir}/alibi.safetensors' --format hf '${_hf_dir}/alibi' 2>&1); then exit 1; fi; \
echo \"$out\"; echo \"$out\" | grep -q \"field 'posenc.type'\" && test ! -e '${_hf_dir}/alibi'")

# Bad options: an unknown --format and a missing DIR name the option.
add_test(NAME cli_hf_bad_options
         COMMAND sh -c "if out=$('${_hf_bin}' export --checkpoint x --format gguf d 2>&1); then exit 1; fi; \
echo \"$out\" | grep -q -- '--format' && \
if out=$('${_hf_bin}' import --out x.safetensors 2>&1); then exit 1; fi; echo \"$out\"; echo \"$out\" | grep -q 'directory argument DIR'")
