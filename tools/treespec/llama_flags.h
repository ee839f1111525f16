// llama.cpp's command-line spellings, handled in one place for every subcommand (run,
// serve and bench share it through main): flags that only make sense on a GPU build are
// accepted with a one-line warning, chat-mode flags turn `run` into `chat`, and no
// multi-letter flag after one dash ("-ngl", "-cnv") ever reaches CLI11, which would
// split it into single-letter flags ("-n" "-g" "-l") and report something misleading.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace treespec::cli {

// Rewrites argv before parsing: "-np" -> "--parallel", "-md" -> "--model-draft"; drops
// the flags that do not apply to a CPU engine (with their value where llama.cpp takes
// one) after a warning on `warn`; `run -cnv` (-i, -if, --conversation, ...) becomes
// `chat`. Throws InvalidArgument for a chat-mode flag of another subcommand and for any
// other multi-letter flag after one dash. Arguments after "--" are kept.
std::vector<std::string> rewrite_llama_flags(int argc, char** argv, std::FILE* warn = stderr);

}  // namespace treespec::cli
