// treespec convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf [--name NAME] [--type f32|f16]
// Thin wrapper over gguf::convert_llama2c_files.
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "gguf/llama2c.h"
#include "tensor/dtype.h"
#include "treespec/status.h"

namespace {

struct ConvertArgs {
  std::string llama2c;
  std::string tokenizer;
  std::string out;
  std::string name;
  std::string type = "f32";
};

std::function<int()> setup_convert(CLI::App& sub) {
  auto args = std::make_shared<ConvertArgs>();
  sub.add_option("--llama2c", args->llama2c, "llama2.c checkpoint (legacy format, e.g. stories260K.bin)")->required();
  sub.add_option("--tokenizer", args->tokenizer, "llama2.c tokenizer file (e.g. tok512.bin)")->required();
  sub.add_option("-o,--output", args->out, "output GGUF path")->required();
  sub.add_option("--name", args->name, "general.name (default: the checkpoint's file name without extension)");
  sub.add_option("--type", args->type, "weight type for matrices: f32 (default) or f16 (norms stay f32)");
  return [args]() -> int {
    using namespace treespec;
    gguf::Llama2cConvertOptions opts;
    opts.name = args->name.empty() ? std::filesystem::path(args->llama2c).stem().string() : args->name;
    const auto type = tensor::dtype_from_name(args->type);
    if (!type || (*type != tensor::DType::f32 && *type != tensor::DType::f16)) {
      throw InvalidArgument("--type must be f32 or f16, got '" + args->type + "'");
    }
    opts.type = *type;
    const auto s = gguf::convert_llama2c_files(args->llama2c, args->tokenizer, args->out, opts);
    std::printf("wrote %s: llama, %d layers, dim %d, vocab %d, %zu tensors, %lld parameters, %s weights%s\n",
                args->out.c_str(), s.config.n_layers, s.config.dim, s.config.vocab_size, s.n_tensors,
                static_cast<long long>(s.n_params), tensor::dtype_name(opts.type),
                s.config.shared_classifier ? ", output tied to token_embd" : "");
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("convert", "Convert a llama2.c checkpoint and tokenizer to a llama GGUF", setup_convert);
