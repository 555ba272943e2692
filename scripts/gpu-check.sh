#!/usr/bin/env bash
# The whole GPU check of actorch in one go (issue 25; ../shared/DEVICE.md).
#
#   bash scripts/gpu-check.sh bundle   # here: build (Release, sm_90) and pack .device/
#   bash scripts/gpu-check.sh          # on the GPU machine, with .device carried along
#   bash scripts/gpu-check.sh torch2   # there: only the torch 2.x backend's check (below)
#
# On the GPU machine it runs every [cuda] test (each CUDA kernel against its CPU twin on random
# shapes, streams, copies, the NCCL group at world 1, DDP over NCCL, the loader's device
# prefetch, a GPU trainer actor), the digits job with --device cuda next to the same job on the
# CPU, the digits CNN on the GPU, whether the job's trace shows each batch copied while the step
# before it ran (scripts/trace_overlap.py), and the h2d and gpu-step workloads next to PyTorch on
# the same GPU (bench/peer_gpu.py); and the torch.distributed backend "actorch" built there against
# the machine's torch 2.x, running DDP's demo_basic on CUDA tensors through actorch's NCCL group
# next to torch's nccl, and two ranks on one GPU (host copies over Gloo, as NCCL refuses them)
# running demo_basic and DDP with SyncBatchNorm next to torch's gloo (tests/tools/torch2_backend.py).
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
  # The static libraries the torch backend links, for building it there against that torch.
  tar -C "$b" -cJf .device/torch2-libs.tar.xz comm/libactorch_comm.a core/libactorch_core.a \
    kernels/libactorch_kernels.a base/libactorch_base.a
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

# actorch's torch.distributed backend against this machine's torch (2.x: python/src/
# torch_backend.cpp's c10d::Backend), CUDA tensors on actorch's NCCL group: built with the
# machine's compiler from the carried static libraries and the bundle's shared ones, then
# tests/tools/torch2_backend.py. Only the extension is built: actorch's Python package is built
# for Debian's Python, not this one's.
check_torch2_backend() {
  local dir=/tmp/actorch-torch2 blog=$logs/torch2-build.log
  rm -rf "$dir" && mkdir -p "$dir/libs" "$dir/ext"
  tar -C "$dir/libs" -xJf .device/torch2-libs.tar.xz
  # One argument per line: torch's include paths and pybind11 ABI flags, this Python's headers.
  if ! python3 - "$dir" > "$blog" 2>&1 <<'PY'; then
import os, sys, sysconfig, warnings, torch
from torch.utils import cpp_extension as ext
d = sys.argv[1]
assert torch._C._GLIBCXX_USE_CXX11_ABI, "this torch uses the old C++ ABI; actorch's libraries the new"
wheels = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia")
cuda = ["/usr/local/cuda/include"] + [os.path.join(wheels, n, "include") for n in ("cuda_runtime", "nccl")]
includes = ext.include_paths() + [sysconfig.get_paths()["include"]] + [p for p in cuda if os.path.isdir(p)]
flags = ["-isystem" + p for p in includes]
warnings.simplefilter("ignore")  # 2.x deprecates asking for pybind11's ABI flags, and still needs them
flags += getattr(ext, "_get_pybind11_abi_build_flags", list)()
open(f"{d}/cflags", "w").write("\n".join(flags) + "\n")
libs = ext.library_paths()[0]
names = ("c10", "c10_cuda", "torch", "torch_cpu", "torch_cuda", "torch_python")
open(f"{d}/ldflags", "w").write("\n".join(["-L" + libs, "-Wl,-rpath," + libs] + ["-l" + n for n in names]) + "\n")
open(f"{d}/suffix", "w").write(sysconfig.get_config_var("EXT_SUFFIX"))
print("torch", torch.__version__, "python", sys.version.split()[0])
PY
    verdict FAIL "torch 2.x backend: build" "$(tail -3 "$blog" | tr '\n' ' ')"
    return
  fi
  local cuda_libs=() name found d
  for name in cudart cublas cublasLt nccl; do
    found=""
    for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do
      found=$(ls "$d"/lib$name.so "$d"/lib$name.so.* 2>/dev/null | head -1)
      [ -n "$found" ] && break
    done
    [ -n "$found" ] && cuda_libs+=("$found" "-Wl,-rpath,$(dirname "$found")")
  done
  mapfile -t cflags < "$dir/cflags"
  mapfile -t ldflags < "$dir/ldflags"
  g++ --version | head -1 >> "$blog"
  if ! g++ -std=c++20 -O2 -fPIC -shared -DACTORCH_HAVE_CUDA=1 -DACTORCH_TORCH_CUDA=1 -I. \
    "${cflags[@]}" python/src/torch_backend.cpp -o "$dir/ext/_torch_backend$(cat "$dir/suffix")" \
    -Wl,--start-group "$dir"/libs/*/*.a -Wl,--end-group /tmp/actorch-device/lib/*.so* \
    -Wl,-rpath,/tmp/actorch-device/lib "${cuda_libs[@]}" "${ldflags[@]}" >> "$blog" 2>&1; then
    verdict FAIL "torch 2.x backend: build" "see $blog: $(grep -m3 'error' "$blog" | tr '\n' ' ' | cut -c1-400)"
    return
  fi
  verdict PASS "torch 2.x backend: build" "$(grep -m1 '^torch ' "$blog"), $(tail -1 "$blog")"
  local line v rest
  # The bundle's libraries need each other (Debian's Gloo needs hiredis): the path, not an rpath.
  LD_LIBRARY_PATH=/tmp/actorch-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 300 \
    python3 tests/tools/torch2_backend.py "$dir/ext" "$dir/out" > "$logs/torch2.log" 2>&1
  grep -qE '^(PASS|FAIL) ' "$logs/torch2.log" ||
    verdict FAIL "torch 2.x backend: run" "$(tail -5 "$logs/torch2.log" | tr '\n' ' ' | cut -c1-400)"
  while read -r line; do
    v=${line%% *} rest=${line#* }
    verdict "$v" "torch 2.x: ${rest%% world=*}" "world=${rest#* world=}"
  done < <(grep -E '^(PASS|FAIL) ' "$logs/torch2.log")
}
if [ "${1:-}" = torch2 ]; then
  check_torch2_backend
  finish
fi
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
check_torch2_backend
finish
