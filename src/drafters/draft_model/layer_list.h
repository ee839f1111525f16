// Layer lists for self-drafting (`--draft-layers 0-2,4`) and layer-subset GGUF files
// (`treespec subset`): the same subset either runs inside the full model's weights
// (Model::run_layer_list, no copy) or is written out as a smaller model of its own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::drafters {

// Parses "0,1,2", "0-2,4" (or "0-2+4": '+' also separates items, for bench method specs
// where ',' separates methods) into strictly increasing layer indices in [0, n_layer).
// InvalidArgument naming `flag` and the offending item (syntax, range, order, duplicate).
std::vector<int32_t> parse_layer_list(std::string_view text, int32_t n_layer, std::string_view flag = "--draft-layers");

// "0-2,4" form of a list (runs of consecutive layers collapsed), for names and logs.
std::string format_layer_list(std::span<const int32_t> layers);

// Writes a copy of the GGUF model `in` that keeps only `layers` (renumbered 0..k-1 in
// list order), the embedding, final norm and output, with <arch>.block_count = k; all other
// metadata (tokenizer included) is copied. Tensor bytes are copied unchanged. Errors:
// IoError, FormatError (missing block_count or a layer tensor), InvalidArgument (layers).
void write_layer_subset(const std::string& in, const std::string& out, std::span<const int32_t> layers);

}  // namespace treespec::drafters
