#!/usr/bin/env bash
# Installs the Debian 12 packages treespec needs to build and test, only those missing.
# Idempotent and quick when everything is present. Extra packages can be passed as
# arguments (e.g. scripts/setup.sh clang libclang-rt-14-dev for fuzzing).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 python3-setuptools python3-pip python3-wheel binutils
  python3-jinja2  # the chat-template conformance tests render their expectations with it (docs/chat.md)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libfmt-dev libutf8proc-dev
  zlib1g-dev
  clang-format-14  # make format / make format-check (.clang-format; the version fixes the output)
  chromium  # the chat page's browser test drives it headless (tests/integration/server/chat_page_browser.py)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing missing Debian packages: ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
