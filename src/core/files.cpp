#include "core/files.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "treespec/status.h"

namespace treespec::core {

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(fmt::format("cannot open {} '{}'", what, path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace treespec::core
