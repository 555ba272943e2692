#!/usr/bin/env bash
# Fails, naming the files, unless every C++ source of the tree is as clang-format leaves it
# (.clang-format; Debian 12's clang-format 14, from `scripts/setup.sh test`).
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null ||
  { echo "check_format: clang-format not found (bash scripts/setup.sh test installs it)" >&2; exit 1; }
mapfile -t files < <(find base kernels core comm actors tools examples bench tests \
  -name build -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sort)
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from clang-format's layout: ${bad[*]}" >&2
  echo "check_format: run clang-format -i on them" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
