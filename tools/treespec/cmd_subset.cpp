// treespec subset -m IN.gguf -o OUT.gguf --layers LIST
// Writes a smaller model made of some of a model's layers (plus its embedding, final norm
// and output): the file form of `--draft-layers`, e.g. a draft to expand like its target.
#include <cstdio>

#include "command.h"
#include "drafters/draft_model/layer_list.h"
#include "gguf/gguf.h"

namespace {

std::function<int()> setup_subset(CLI::App& sub) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto layers = std::make_shared<std::string>();
  sub.add_option("-m,--model", *in, "source GGUF")->required();
  sub.add_option("-o,--output", *out, "output GGUF")->required();
  sub.add_option("--layers", *layers, "layers to keep, in increasing order, e.g. 0,1 or 0-2,4")->required();
  return [in, out, layers]() -> int {
    using namespace treespec;
    const auto src = gguf::GgufFile::open(*in);
    const std::string arch = src->get_string("general.architecture");
    const auto n_layer = static_cast<int32_t>(src->get_int(arch + ".block_count"));
    const auto keep = drafters::parse_layer_list(*layers, n_layer, "--layers");
    drafters::write_layer_subset(*in, *out, keep);
    std::printf("wrote %s: layers %s of %d\n", out->c_str(), drafters::format_layer_list(keep).c_str(), n_layer);
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("subset", "Write a model made of a subset of another model's layers", setup_subset);
