// Whole-file reads for the small text inputs users name on the command line (prompts,
// chat templates, tree choices, JSON messages).
#pragma once

#include <string>
#include <string_view>

namespace treespec::core {

// The file's bytes. IoError "cannot open <what> '<path>'" when it cannot be read.
std::string read_text_file(const std::string& path, std::string_view what);

}  // namespace treespec::core
