// train/cli/cli_tokenizer.cpp — `ctxlab tokenizer train`: learn a SentencePiece BPE or unigram model
// on a text file (train/io/tokenizer_sp.h), for `--tokenizer` of train / eval / finetune / sample.
#include <cstdio>

#include <cxxopts.hpp>

#include "train/run_dir.h"  // check_output_file
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/io/data_files.h"
#include "train/io/fileio.h"
#include "train/io/tokenizer_sp.h"

namespace ctx::cli {

namespace {

int run_tokenizer_train(int argc, char** argv) {
  SentencePieceTrainOptions d;
  cxxopts::Options o(
      "ctxlab tokenizer train",
      "Learn a SentencePiece tokenizer (BPE or unigram) on text (files, a directory, JSONL) and write\n"
      "its .model file.\n"
      "The model is lossless on any UTF-8 text: no normalisation, whitespace kept, byte fallback for\n"
      "unseen characters. The vocabulary counts the 256 byte pieces and <unk>.\n"
      "\n"
      "examples:\n"
      "  ctxlab tokenizer train --data data/pride_and_prejudice.txt --vocab 4000 --type bpe --out bpe4k.model\n"
      "  ctxlab train --preset small --tokenizer bpe4k.model --out runs/small-bpe");
  o.add_options()("data", str("training text, e.g. data/pride_and_prejudice.txt; ", kDataFilesHelp,
                              " (token files are refused: they are tokenized already)"),
                  cxxopts::value<std::vector<std::string>>())(
      "vocab", "vocabulary size, e.g. 4000 (at least 256 byte pieces + the characters of the text)",
      cxxopts::value<int64_t>()->default_value(std::to_string(d.vocab)))(
      "type", "bpe | unigram", cxxopts::value<std::string>()->default_value(d.type))(
      "max-lines", "learn from at most N randomly chosen lines (0 = all), e.g. 100000",
      cxxopts::value<int64_t>()->default_value("0"))(
      "out", "the model file to write, e.g. bpe4k.model", cxxopts::value<std::string>())("h,help", "this help");
  add_data_field_option(o, "");
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "data", o);
  require(*r, "out", o);
  check_output_file((*r)["out"].as<std::string>(), "--out");
  SentencePieceTrainOptions opt;
  opt.data = data_list_option(*r, "data");
  opt.field = (*r)["data-field"].as<std::string>();
  opt.vocab = (*r)["vocab"].as<int64_t>();
  opt.type = (*r)["type"].as<std::string>();
  opt.max_lines = (*r)["max-lines"].as<int64_t>();
  const std::string out = (*r)["out"].as<std::string>();
  const std::string model = train_sentencepiece(opt);
  SentencePieceTokenizer tok(model, out);  // checks that the model loads
  write_file_atomic(out, {{model.data(), model.size()}}, "tokenizer model");
  const std::string text = load_text(data_sources(opt.data, "--data"), opt.field, "--data");
  const size_t n = tok.encode(text).size();
  std::printf("tokenizer: %s %s, vocab %lld, %zu bytes -> %zu tokens (%.2f bytes/token) on %s\nwrote %s\n",
              opt.type.c_str(), tok.type().c_str(), (long long)tok.vocab_size(), text.size(), n,
              n ? (double)text.size() / (double)n : 0.0, opt.data.c_str(), out.c_str());
  return 0;
}

}  // namespace

int run_tokenizer(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "train") return run_tokenizer_train(argc - 1, argv + 1);
  if (argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::printf("usage: ctxlab tokenizer train --data FILE --vocab N --type bpe|unigram --out tok.model\n");
    return 0;
  }
  throw Error(str("ctxlab tokenizer: expected the sub-command 'train'",
                  argc >= 2 ? str(", got ", quoted_str(argv[1])) : std::string(),
                  " (usage: ctxlab tokenizer train --data FILE --vocab N --type bpe|unigram --out tok.model)"));
}

}  // namespace ctx::cli
