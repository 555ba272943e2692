#!/usr/bin/env bash
# Fails, naming the files, unless every C++ source of the tree (git's list of its files, python/
# included) is as clang-format leaves it (.clang-format; Debian 12's clang-format 14, from
# `scripts/setup.sh test`).
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null ||
  { echo "check_format: clang-format not found (bash scripts/setup.sh test installs it)" >&2; exit 1; }
# Every C++ source git knows of, committed or not yet (ignored build trees aside), wherever it
# lies: no folder list to keep up to date.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
  '*.cpp' '*.hpp' '*.cu' '*.cuh' | sort -u)
[ ${#files[@]} -gt 0 ] || { echo "check_format: git lists no C++ source in $PWD" >&2; exit 1; }
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
