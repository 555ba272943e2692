#!/usr/bin/env bash
# The whole GPU check of actorch in one go (issue 25; ../shared/DEVICE.md).
#
#   bash scripts/gpu-check.sh bundle   # here: build (Release, sm_90) and pack .device/
#   bash scripts/gpu-check.sh          # on the GPU machine, with .device carried along
#
# On the GPU machine it runs every [cuda] test (each CUDA kernel against its CPU twin on random
# shapes, streams, copies, the NCCL group at world 1, DDP over NCCL, the loader's device
# prefetch, a GPU trainer actor), the digits job with --device cuda next to the same job on the
# CPU, the digits CNN on the GPU, whether the job's trace shows each batch copied while the step
# before it ran (scripts/trace_overlap.py), and the h2d and gpu-step workloads next to PyTorch on
# the same GPU (bench/peer_gpu.py).
# One verdict line per check, then `N passed, N failed`; logs go to $OUT (the device tool's
# folder that comes back) or /tmp/actorch-gpu-check. Exit status: the number of failures.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = bundle ]; then
  set -e
  cmake --preset release > build/release.configure.log
  cmake --build --preset release
  grep -q 'sm_90' build/release/build.ninja ||
    { echo "gpu-check: build/release is not built for sm_90 (nvcc missing?)" >&2; exit 1; }
  b=build/release
  mkdir -p "$(git rev-parse --git-dir)/info" # device-bundle.sh appends .device/ to its exclude
  bash ../shared/tools/device-bundle.sh "$b/tests/actorch_core_tests" \
    "$b/tests/comm/actorch_comm_tests" "$b/tests/actors/actorch_actors_tests" \
    "$b/tools/actorch" "$b/examples/digits_actors"
  exit 0
fi

logs=${OUT:-/tmp/actorch-gpu-check}
mkdir -p "$logs"
passed=0
failed=0
verdict() { # verdict PASS|FAIL name detail...
  local v=$1 name=$2
  shift 2
  printf '%-4s %-34s %s\n' "$v" "$name" "$*"
  if [ "$v" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
holds() { # holds PYTHON-EXPRESSION: the expression over the measured numbers is true
  python3 -c "import sys; sys.exit(0 if ($1) else 1)"
}
finish() {
  echo "$passed passed, $failed failed"
  exit "$failed"
}

[ -f .device/unpack.sh ] || { verdict FAIL bundle "no .device/: run 'bash scripts/gpu-check.sh bundle' and carry .device"; finish; }
bash .device/unpack.sh
run=/tmp/actorch-device/run.sh
if nvidia-smi -L > "$logs/nvidia-smi.log" 2>&1; then
  verdict PASS gpu "$(head -1 "$logs/nvidia-smi.log")"
else
  verdict FAIL gpu "nvidia-smi found no GPU"
  finish
fi

# The [cuda] tests of each layer. On a GPU machine none may skip.
for layer in core comm actors; do
  exe=actorch_${layer}_tests
  log=$logs/tests-$layer.log
  if timeout 300 "$run" "$exe" "[cuda]" > "$log" 2>&1; then
    if grep -q "skipped, no GPU" "$log"; then
      verdict FAIL "[cuda] tests: $layer" "skipped: $(grep -m1 'skipped, no GPU' "$log")"
    else
      verdict PASS "[cuda] tests: $layer" "$(tail -2 "$log" | tr -s '\n' ' ')"
    fi
  else
    verdict FAIL "[cuda] tests: $layer" "see $log: $(grep -m3 -E 'FAILED|REQUIRE|CHECK|error' "$log" | tr '\n' ' ' | cut -c1-300)"
  fi
done

# The digits job on the GPU against the same job on the CPU.
accuracy() { sed -n 's/^test accuracy \([0-9.]*\).*/\1/p' "$1"; }
for dev in cpu cuda; do
  timeout 300 "$run" digits_actors --device "$dev" --epochs 10 --plot 0 \
    --data examples/data/digits.csv.gz --out "$logs/digits-$dev" \
    --trace "$logs/digits-$dev.trace.json" > "$logs/digits-$dev.log" 2>&1
done
cpu_acc=$(accuracy "$logs/digits-cpu.log")
gpu_acc=$(accuracy "$logs/digits-cuda.log")
if [ -n "$gpu_acc" ] && [ -n "$cpu_acc" ] &&
  holds "$gpu_acc >= 0.9 and abs($gpu_acc - $cpu_acc) <= 0.02"; then
  verdict PASS "digits --device cuda" "test accuracy $gpu_acc (cpu $cpu_acc, 10 epochs)"
else
  verdict FAIL "digits --device cuda" "test accuracy '${gpu_acc}' (cpu '${cpu_acc}'): $(tail -2 "$logs/digits-cuda.log" | tr '\n' ' ')"
fi

# The digits CNN (convolutions, pooling, dropout2d on the GPU kernels) must learn there too.
timeout 120 "$run" digits_actors --model cnn --device cuda --epochs 10 --plot 0 \
  --data examples/data/digits.csv.gz --out "$logs/digits-cnn" > "$logs/digits-cnn.log" 2>&1
cnn_acc=$(accuracy "$logs/digits-cnn.log")
if [ -n "$cnn_acc" ] && holds "$cnn_acc >= 0.97"; then
  verdict PASS "digits --model cnn --device cuda" "test accuracy $cnn_acc (10 epochs)"
else
  verdict FAIL "digits --model cnn --device cuda" "test accuracy '${cnn_acc}': $(tail -2 "$logs/digits-cnn.log" | tr '\n' ' ')"
fi

# The GPU run's trace: was each next batch copied while the step before it ran?
if overlap=$(python3 scripts/trace_overlap.py "$logs/digits-cuda.trace.json" 2>&1); then
  verdict PASS "prefetch during the step" "$overlap"
else
  verdict FAIL "prefetch during the step" "$(echo "$overlap" | tr '\n' ' ' | cut -c1-300)"
fi

# h2d and gpu-step, actorch's next to PyTorch's, in the same run on the same GPU.
timeout 120 "$run" actorch bench h2d > "$logs/h2d.log" 2>&1
warmup=5 steps=200 # both sides time as many steps, after as many untimed ones
timeout 120 "$run" actorch bench ddp-mlp --device cuda --warmup $warmup --steps $steps \
  > "$logs/gpu-step.log" 2>&1
timeout 300 python3 bench/peer_gpu.py cuda:0 $steps $warmup > "$logs/peer.log" 2>&1
cat "$logs/h2d.log" "$logs/gpu-step.log" "$logs/peer.log"
value() { # value FILE PATTERN KEY: KEY's value on the first line of FILE matching PATTERN
  grep -m1 -E "$2" "$1" | tr ' ' '\n' | sed -n "s/^$3=//p"
}
for size in batch 64MiB; do
  mine=$(value "$logs/h2d.log" "^h2d source=pinned size=$size " GB_per_s)
  raw=$(value "$logs/h2d.log" "^h2d source=cudaMemcpyAsync-pinned size=$size " GB_per_s)
  torch=$(value "$logs/peer.log" "^torch-h2d source=pinned size=$size " GB_per_s)
  if [ -n "$mine" ] && [ -n "$raw" ] && holds "$mine >= 0.9 * $raw"; then
    verdict PASS "h2d pinned $size" "$mine GB/s, cudaMemcpyAsync loop $raw, torch ${torch:-?}"
  else
    verdict FAIL "h2d pinned $size" "'$mine' GB/s against cudaMemcpyAsync loop '$raw' (target 90%), torch '${torch:-?}'"
  fi
done
mine=$(value "$logs/gpu-step.log" "^ddp-mlp mode=single" ms_per_step)
torch=$(value "$logs/peer.log" "^torch-gpu-step" ms_per_step)
if [ -n "$mine" ] && [ -n "$torch" ] && holds "$mine <= $torch"; then
  verdict PASS "gpu-step" "$mine ms per step, torch eager $torch ms"
else
  verdict FAIL "gpu-step" "'$mine' ms per step, torch eager '$torch' ms (target: at most torch's)"
fi
finish
