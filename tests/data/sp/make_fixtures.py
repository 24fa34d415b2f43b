#!/usr/bin/env python3
# tests/data/sp/make_fixtures.py — writes the SentencePiece fixtures of tests/test_tokenizer.cpp
# (SentencePieceModelCheck) with PyPI's sentencepiece (its trainer and sentencepiece_model_pb2):
#   rules.model            a valid BPE model with user normalisation rules (A -> a, B -> b): a small
#                          precompiled_charsmap (darts-clone double array + replacement strings)
#   nul_user_piece.model   a USER_DEFINED piece "\0": libsentencepiece's trie builder throws
#                          Darts::Details::Exception (not std::runtime_error) out of the loader
#   bad_charsmap.model     normalizer_spec.precompiled_charsmap whose double array points outside
#                          itself: libsentencepiece reads out of bounds on the first encode
#   bad_decharsmap.model   the same in denormalizer_spec: read out of bounds on the first decode
# Run from this folder: python3 make_fixtures.py CORPUS.txt (the repository's data/ corpus).
import sys
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

with open("rules.tsv", "w") as f:
    f.write("41\t61\n42\t62\n")
spm.SentencePieceTrainer.train(input=sys.argv[1], model_prefix="rules", vocab_size=400, model_type="bpe",
                               normalization_rule_tsv="rules.tsv", byte_fallback=True,
                               character_coverage=1.0, minloglevel=2, input_sentence_size=2000)


def tiny(extra):
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    p = m.pieces.add(); p.piece = "<unk>"; p.type = pb.ModelProto.SentencePiece.UNKNOWN
    p = m.pieces.add(); p.piece = "a"; p.type = pb.ModelProto.SentencePiece.NORMAL
    extra(m)
    return m.SerializeToString()


def nul_piece(m):
    p = m.pieces.add(); p.piece = "\0"; p.type = pb.ModelProto.SentencePiece.USER_DEFINED


garbage = b"\x04\x00\x00\x00" + b"\xff" * 4 + b"abc"  # one unit: offset 2^30-ish, 3 bytes of strings
for name, extra in [("nul_user_piece", nul_piece),
                    ("bad_charsmap", lambda m: setattr(m.normalizer_spec, "precompiled_charsmap", garbage)),
                    ("bad_decharsmap", lambda m: setattr(m.denormalizer_spec, "precompiled_charsmap", garbage))]:
    open(name + ".model", "wb").write(tiny(extra))
