#!/usr/bin/env bash
# Installs what is missing, builds actorch (Release) and runs the main job: the digits MLP
# trained data-parallel by 2 processes (started by `actorch launch`), each with a trainer actor
# fed by the actor data pipeline; the optimizer step is sharded over the two processes
# (actors/trainer/sharded_step.cpp: each reduces and updates its half of the parameters).
# Writes digits-run/{digits_ddp.safetensors, model.safetensors, test_indices.npy, metrics.csv,
# curves.png, trace.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The main job needs neither the tests nor what only they use (numpy, PyTorch): configure them
# off. The presets set ACTORCH_BUILD_TESTS=ON, so `scripts/test.sh` turns them on again in the
# same build tree (the setting is never left behind for it), whichever of the two runs first.
mkdir -p build
cmake --preset release -DACTORCH_BUILD_TESTS=OFF > build/release.configure.log 2>&1 ||
  { cat build/release.configure.log; exit 1; }
cmake --build --preset release --target digits_ddp actorch
export OPENBLAS_NUM_THREADS=1 # one compute thread per replica
./build/release/tools/actorch launch --nproc-per-node 2 ./build/release/examples/digits_ddp \
  --out digits-run --epochs 30 --trace digits-run/trace.json "$@"
