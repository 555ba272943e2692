#!/usr/bin/env bash
# Installs what is missing, builds actorch (Release) and runs the main job: for now the tensor
# demo of examples/tensor_demo.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release > /dev/null
cmake --build --preset release --target tensor_demo actorch
./build/release/examples/tensor_demo
