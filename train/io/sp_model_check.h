// train/io/sp_model_check.h — checks a serialized SentencePiece ModelProto before libsentencepiece
// parses it. The library trusts its input: a piece holding a NUL byte makes its trie builder throw
// a non-std::runtime_error exception out of the loader, and a damaged precompiled_charsmap (the
// normalisation rules: a darts-clone double array + the replacement strings) is read out of
// bounds on the first encode or decode. This walks the protobuf wire format (ModelProto:
// pieces = 1, normalizer_spec = 3, denormalizer_spec = 5; SentencePiece.piece = 1;
// NormalizerSpec.precompiled_charsmap = 2) and refuses such models with an error naming the
// source, the field and the index. Everything else is left to the library's own checks.
#pragma once
#include <string>

namespace ctx {

// Throws ctx::Error("SOURCE: not a SentencePiece model (REASON)") when the bytes are not a
// well-formed protobuf message, a piece holds a NUL byte, or a charsmap's double array can reach
// outside itself or its strings (REASON names the field, e.g. "piece 2", and what is wrong).
void check_sentencepiece_model(const std::string& model, const std::string& source);

}  // namespace ctx
