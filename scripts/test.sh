#!/usr/bin/env bash
# Installs what is missing, builds actorch and runs the whole test suite: the Release build,
# then the same suite under ASan+UBSan and under TSan. Exits non-zero on any failure.
# Usage: test.sh [PRESET...]   (default: release asan tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
presets=(release asan tsan)
[ $# -eq 0 ] || presets=("$@")
for preset in "${presets[@]}"; do
  echo "== ${preset}: configure, build, test"
  # TSan needs a TSan-instrumented CAF (Debian's is not): built once, cached outside the tree.
  if [ "$preset" = tsan ]; then bash scripts/build-tsan-caf.sh; fi
  mkdir -p build
  cmake --preset "$preset" > "build/${preset}.configure.log" 2>&1 ||
    { cat "build/${preset}.configure.log"; exit 1; }
  cmake --build --preset "$preset"
  ctest --preset "$preset"
done
