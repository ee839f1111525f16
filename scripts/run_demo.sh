#!/usr/bin/env bash
# `make run`: generate text with the project's default model.
set -euo pipefail
BUILD=${1:-build}
echo "treespec built at $BUILD/tools/treespec/treespec (demo model not wired yet)"
