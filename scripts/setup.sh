#!/usr/bin/env bash
# Installs everything actorch needs on Debian 12, as root. Idempotent: when every package is
# already present it touches nothing (no apt-get update), so repeated runs cost a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  libcaf-dev libgloo-dev libconcurrentqueue-dev catch2 libopenblas-dev
  libcli11-dev zlib1g-dev libsqlite3-dev
  python3 python3-numpy
  gnuplot-nox
)

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
