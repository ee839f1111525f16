#!/usr/bin/env bash
# Formats the C/C++ sources with the root .clang-format (docs/architecture.md,
# "Formatting and lint"): every tracked .h/.hpp/.c/.cc/.cpp file under src/, tools/,
# tests/, benchmarks/ and include/.
#   scripts/format.sh           formats them in place (make format)
#   scripts/format.sh --check   changes nothing; lists the files clang-format would change
#                               and exits 1 if there are any (make format-check, CI)
# Only clang-format 14 (Debian 12's clang-format-14, installed by scripts/setup.sh) is
# used: other versions format some constructs differently.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

cf=
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then cf=$(command -v "$c"); break; fi
done
if [ -z "$cf" ]; then
  echo "format: clang-format 14 not found (scripts/setup.sh installs Debian's clang-format-14)" >&2
  exit 2
fi

jobs=$(nproc 2>/dev/null || echo 2)
files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -- src tools tests benchmarks include
  else
    find src tools tests benchmarks include -type f -print0
  fi | grep -zE '\.(h|hpp|c|cc|cpp)$' || true
}

if [ "$check" -eq 0 ]; then
  files | xargs -0 -r -n 20 -P "$jobs" "$cf" -i
  exit 0
fi

# Each file is compared with clang-format's output for it; those that differ are listed.
bad=$(files | xargs -0 -r -n 1 -P "$jobs" sh -c '"$0" "$1" | cmp -s - "$1" || echo "$1"' "$cf" | sort)
if [ -n "$bad" ]; then
  n=$(printf '%s\n' "$bad" | wc -l)
  echo "format-check: $n file(s) not formatted by .clang-format (run make format):"
  printf '%s\n' "$bad" | sed 's/^/  /'
  exit 1
fi
echo "format-check: all files formatted"
