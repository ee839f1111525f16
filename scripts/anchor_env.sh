# Shared set-up of the side-by-side scripts against ../shared/anchors
# (arch_vs_anchor.sh, tokenize_vs_anchor.sh); sourced, with the caller's arguments:
#   [BUILD_DIR] [ANCHOR_BIN]
#     BUILD_DIR   default build (needs tools/treespec/treespec and tests/tiny_model_tool)
#     ANCHOR_BIN  default ${TREESPEC_SHARED:-../shared}/anchors/ik_llama.cpp/bin
# Sets root, build, anchor, ts (treespec), tool (tiny_model_tool), extra (llama-cli flags
# the anchor needs) and work (a temporary directory removed on exit).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
anchor=${2:-${TREESPEC_SHARED:-$root/../shared}/anchors/ik_llama.cpp/bin}
ts=$build/tools/treespec/treespec
tool=$build/tests/tiny_model_tool
for f in "$ts" "$tool" "$anchor/llama-cli"; do
  [[ -x $f ]] || { echo "$(basename "$0" .sh): $f is missing (build with 'make', or pass the anchor's bin)" >&2; exit 2; }
done
# llama.cpp's newer llama-cli starts a conversation unless told not to; ik's has no such flag.
extra=()
"$anchor/llama-cli" --help 2>&1 | grep -q -- '-no-cnv' && extra=(-no-cnv)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
