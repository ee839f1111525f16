#!/usr/bin/env bash
# clang-tidy 14 with the root .clang-tidy over the sources of src/ (make lint;
# docs/architecture.md, "Formatting and lint").
#   scripts/lint.sh [BUILD_DIR [FILE_REGEX]]
# BUILD_DIR (default build-lint) must hold a compile_commands.json of a configure with
# TREESPEC_UNITY=OFF (a unity build lists its unity TUs, not the source files; make lint
# configures one). FILE_REGEX (default: everything under src/) picks the files, e.g.
# 'src/engine/'. LINT_JOBS files run at a time (default: all cores). Prints each finding
# once (a header's findings repeat in every file that includes it), writes them to
# BUILD_DIR/lint.log, and exits 1 if there are any.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-lint}
files=${2:-src/}
jobs=${LINT_JOBS:-$(nproc 2>/dev/null || echo 2)}
tidy=$(command -v clang-tidy-14 || true)
if [ -z "$tidy" ]; then
  echo "lint: clang-tidy-14 not found (scripts/setup.sh clang-tidy-14)" >&2
  exit 2
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: no $build/compile_commands.json (make lint configures build-lint)" >&2
  exit 2
fi

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
regex="$PWD/$files"
if command -v run-clang-tidy-14 >/dev/null 2>&1; then
  run-clang-tidy-14 -clang-tidy-binary "$tidy" -p "$build" -j "$jobs" -quiet "$regex" >"$raw" 2>/dev/null || true
else
  python3 -c 'import json,sys,re; r=re.compile(sys.argv[2])
for e in json.load(open(sys.argv[1])):
    f=e["file"] if e["file"].startswith("/") else e["directory"]+"/"+e["file"]
    if r.search(f): print(f)' "$build/compile_commands.json" "$regex" \
    | sort -u | xargs -r -n 2 -P "$jobs" "$tidy" -p "$build" --quiet >"$raw" 2>/dev/null || true
fi
# Findings in headers reached through build/layers/<m>/<m>/ (cmake/treespec.cmake) are
# reported under src/<m>/.
# (run-clang-tidy-14 colours its output: the escapes are removed first.)
sed -E 's/\x1b\[[0-9;]*m//g' "$raw" | grep -E '^/[^ ]+:[0-9]+:[0-9]+: (warning|error): ' \
  | sed -E "s#^$PWD/[^/:]+/layers/([a-z_]+)/\\1/#$PWD/src/\\1/#; s#^$PWD/##" \
  | sort -u >"$build/lint.log" || true
n=$(wc -l <"$build/lint.log")
cat "$build/lint.log"
if [ "$n" -gt 0 ]; then
  echo "lint: $n finding(s) ($build/lint.log)"
  exit 1
fi
echo "lint: no findings"
