// train/io/base64.h — RFC 4648 base64 (standard alphabet, '=' padding): binary blobs such as a
// tokenizer model inside string-only safetensors __metadata__.
#pragma once
#include <string>

namespace ctx {

std::string base64_encode(const std::string& bytes);
// Throws ctx::Error naming `what` on a character outside the alphabet or a bad length/padding.
std::string base64_decode(const std::string& text, const std::string& what);

}  // namespace ctx
