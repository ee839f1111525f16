// treespec tokenize -m MODEL.gguf [--no-bos] [--no-parse-special] TEXT
// Prints the token ids as one JSON array. Works on vocab-only GGUFs.
#include <cstdio>

#include "command.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool no_bos = false;
  bool no_parse_special = false;
};

std::function<int()> setup_tokenize(CLI::App& sub) {
  auto args = std::make_shared<TokenizeArgs>();
  sub.add_option("-m,--model", args->model, "GGUF file with tokenizer.ggml.* metadata")->required();
  sub.add_flag("--no-bos", args->no_bos, "do not add the automatic BOS (or EOS) the vocab asks for");
  sub.add_flag("--no-parse-special", args->no_parse_special,
               "treat text such as \"<s>\" as plain text instead of the special token");
  sub.add_option("text", args->text, "text to tokenize")->required();
  return [args]() -> int {
    using namespace treespec;
    const auto file = gguf::GgufFile::open(args->model);
    const auto tok = tokenizer::Tokenizer::from_gguf(*file);
    const auto ids = tok->encode(args->text, !args->no_bos, !args->no_parse_special);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("tokenize", "Print the token ids of a text as a JSON array", setup_tokenize);
