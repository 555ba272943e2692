#!/usr/bin/env bash
# Installs what actorch needs on Debian 12, as root. Idempotent: when every package is already
# present it touches nothing (no apt-get update), so repeated runs cost a second.
#
# Usage: setup.sh [PROFILE...]   (default: main)
#   main   build the library (libjpeg and libpng decode images), the tools and the examples, and
#          run the main job (its plot too)
#   test   main, plus what only the test suite uses (numpy and PyTorch for the independent
#          readers and writers and the checks against torch, iproute2 for the network-namespace
#          tests, clang-format for the layout check, pybind11 and pytest for the Python module,
#          OpenMPI's mpirun and PyTorch's torchrun for the launcher tests, torchvision and PIL
#          for the image checks)
#   bench  main, plus what only the benchmarks use (PyTorch for the peer scripts, valgrind
#          for bench/loader_work.py, nlohmann-json for bench/json/json_compare.cpp)
#   ci     test, plus what only .ci/run uses (debootstrap for its fresh Debian 12 root)
set -euo pipefail

main=(
  build-essential cmake ninja-build ccache git pkg-config
  libcaf-dev libgloo-dev libconcurrentqueue-dev catch2 libopenblas-dev
  libcli11-dev zlib1g-dev libsqlite3-dev libdlpack-dev libssl-dev
  libjpeg62-turbo-dev libpng-dev gnuplot-nox
)
test=(python3 python3-numpy python3-torch libtorch-dev iproute2 clang-format python3-dev pybind11-dev
  python3-pytest openmpi-bin python3-torchvision python3-pil)
bench=(python3 python3-numpy python3-torch python3-torchvision python3-pil valgrind nlohmann-json3-dev)
ci=(debootstrap ca-certificates)

packages=("${main[@]}")
for profile in "${@:-main}"; do
  case "$profile" in
    main) ;;
    test) packages+=("${test[@]}") ;;
    bench) packages+=("${bench[@]}") ;;
    ci) packages+=("${test[@]}" "${ci[@]}") ;;
    *) echo "setup: unknown profile '$profile' (main, test, bench or ci)" >&2; exit 2 ;;
  esac
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages (${missing[*]}) and not root: run as root or install them" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
