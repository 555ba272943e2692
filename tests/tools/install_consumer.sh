#!/usr/bin/env bash
# Installs a build of actorch into a fresh prefix, then builds and runs, against that prefix
# alone: examples/consumer with CMake (find_package(actorch)), and a one-file program with
# pkg-config. Usage: install_consumer.sh BUILD_DIR SOURCE_DIR WORK_DIR [CXXFLAGS]
set -euo pipefail
build=$1 src=$2 work=$3 cxxflags=${4:-}
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/actorch"
test -f "$work/prefix/include/actorch/core/tensor.hpp"

echo "== find_package(actorch) from $work/prefix"
cmake -S "$src/examples/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_FLAGS="$cxxflags" > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
OPENBLAS_NUM_THREADS=1 "$work/consumer/consumer"

echo "== pkg-config actorch"
cat > "$work/pc_main.cpp" <<'CPP'
#include <actorch/core/core.hpp>
#include <iostream>
int main() {
  const actorch::tensor x = actorch::arange(6).view({2, 3}).to(actorch::dtype::float32);
  std::cout << "pkg-config: " << x.sum().item<double>() << '\n';
  return x.sum().item<double>() == 15 ? 0 : 1;
}
CPP
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++20 $cxxflags $(pkg-config --cflags actorch) "$work/pc_main.cpp" -o "$work/pc_main" \
  $(pkg-config --libs --static actorch)
"$work/pc_main"
