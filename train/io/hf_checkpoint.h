// train/io/hf_checkpoint.h — Hugging Face `transformers` checkpoint directories (docs/huggingface.md):
// config.json + model.safetensors in the GPT2LMHeadModel layout (learned positions, LayerNorm) or
// the LlamaForCausalLM layout (RoPE, RMSNorm), written from a ctxlab model and read back into one.
// Every ctxlab field either maps exactly (the forward pass is the same function up to float32
// rounding) or is refused with a one-line error naming the field; export -> import is bit-exact.
#pragma once
#include <string>

#include "nn/config.h"
#include "train/io/checkpoint.h"

namespace ctx {

// "gpt2" or "llama": the layout a config exports to. Throws naming the ctxlab field that maps to
// neither (e.g. "field 'norm' is \"layernorm\" ...: Llama's norms are RMSNorm"). `source` starts the message.
std::string hf_layout_for(const ModelConfig& c, const std::string& source);

// The config.json of `c` (transformers' GPT2Config / LlamaConfig keys, plus a "ctxlab" object
// holding what transformers has no field for: the rope pairing and the dropout).
nlohmann::json hf_config_json(const ModelConfig& c, const std::string& source);

// Writes DIR/config.json, DIR/model.safetensors (F32, transformers' names and shapes) and the
// tokenizer files of `tok` (train/io/hf_tokenizer.h; nullptr: bytes). DIR is created when missing;
// files already there are replaced atomically. `source` names the model in errors.
void export_hf(nn::GPT& model, const Tokenizer* tok, const std::string& dir, const std::string& source);

// Reads DIR (config.json, model.safetensors, tokenizer files when ctxlab has the tokenizer) into
// a model. Errors name the file and the field or tensor. `tokenizer_note` (may be null) receives a
// line when DIR has tokenizer files ctxlab cannot use (e.g. GPT-2's BPE): the checkpoint then records
// no tokenizer, and its data must come pre-tokenized.
LoadedModel import_hf(const std::string& dir, std::string* tokenizer_note = nullptr);

}  // namespace ctx
