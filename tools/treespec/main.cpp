// treespec: one binary, many subcommands (run, serve, bench, convert, quantize, expand,
// train-heads, tokenize, info). Errors print one line and exit non-zero.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/options.h"
#include "command.h"
#include "core/mapped_files.h"
#include "llama_flags.h"
#include "treespec/status.h"

namespace treespec::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace treespec::cli

int main(int argc, char** argv) {
  using namespace treespec;
  CLI::App app{"treespec: faster exact decoding of GGUF language models by token-tree verification"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "treespec 0.1.0");

  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::function<int()> to_run;
  for (auto& cmd : registry) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.help);
    auto fn = cmd.setup(*sub);
    sub->callback([&to_run, fn] { to_run = fn; });
  }

  // A model file truncated underneath us: one clear line instead of a bus error.
  core::install_mapped_file_fault_handler();
  try {
    std::vector<std::string> args = cli::rewrite_llama_flags(argc, argv);  // "-np" -> "--parallel"
    std::vector<char*> arg_ptrs;
    for (auto& a : args) arg_ptrs.push_back(a.data());
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const Error& e) {  // a llama.cpp flag treespec refuses ("serve -cnv", "-xyz")
    std::fprintf(stderr, "treespec: error: %s\n", e.what());
    return 1;
  }
  try {
    return to_run ? to_run() : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "treespec: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "treespec: error: %s\n", e.what());
    return 1;
  }
}
