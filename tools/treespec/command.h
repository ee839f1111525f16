// Subcommand registry for the one `treespec` binary. Each cmd_<name>.cpp registers
// itself with TREESPEC_COMMAND; main() builds the CLI11 app from the registry. Commands
// stay thin: parsing, calling into src/, printing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace treespec::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds options to `sub` and returns the function to run after parsing (exit code).
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string help, std::function<std::function<int()>(CLI::App&)> setup) {
    command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace treespec::cli

#define TREESPEC_CONCAT_INNER(a, b) a##b
#define TREESPEC_CONCAT(a, b) TREESPEC_CONCAT_INNER(a, b)
#define TREESPEC_COMMAND(name, help, setup_fn) \
  static ::treespec::cli::CommandRegistrar TREESPEC_CONCAT(treespec_cmd_, __COUNTER__)(name, help, setup_fn)
