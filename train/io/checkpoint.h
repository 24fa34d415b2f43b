// train/io/checkpoint.h — model checkpoints (MODEL_SPEC §5): one safetensors file with every
// parameter as F32 under its §4 name and __metadata__ {format: "ctxlab/1", config, step}.
// Loading validates the file against the config it carries: every parameter present with the
// right shape and a float dtype (F64 / F16 / BF16 converted), every value finite (a NaN or inf
// weight is an error naming the tensor and the element), no unknown tensors. Errors name the
// file and the tensor. The tokenizer a checkpoint records comes back in LoadedModel::tokenizer.
// A model trained with sliding-window attention (train --window W) is saved with
// __metadata__.attention_window = "W" (beside "config": MODEL_SPEC §2's config keys are shared
// with the PyTorch reference); loading sets that window on the model (GPT::set_attention_window).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "nn/gpt.h"
#include "train/io/tokenizer.h"

namespace ctx {

struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  // The tokenizer the file records (__metadata__.tokenizer, train/io/tokenizer.h), its vocab_size
  // checked against the config; nullptr when it records none (then the text is bytes).
  std::shared_ptr<const Tokenizer> tokenizer;
  const Tokenizer& text_tokenizer() const { return tokenizer ? *tokenizer : *byte_tokenizer(); }
};

void save_checkpoint(const std::string& path, nn::GPT& model, int64_t step,
                     const std::map<std::string, std::string>& extra_metadata = {});
// posenc_override: merged into config.posenc before the model is built (eval-time options such
// as "hierarchical" or RoPE scaling). context_override > 0 replaces config.context (finetune at a
// longer context). dt: the model's compute dtype.
LoadedModel load_checkpoint(const std::string& path, DType dt = DType::F32,
                            const nlohmann::json& posenc_override = nlohmann::json(),
                            int64_t context_override = -1);

}  // namespace ctx
