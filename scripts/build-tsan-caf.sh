#!/usr/bin/env bash
# Builds CAF 0.17.6 (the version Debian ships) with -fsanitize=thread from Debian's source
# package and installs it into a cache directory outside any build tree, for the tsan preset
# (ACTORCH_CAF_ROOT). Debian's libcaf_core is not instrumented, so TSan cannot see CAF's own
# synchronisation and reports hundreds of false races (../shared/DEPENDENCIES.md).
# Idempotent: does nothing when the cache already holds a finished build.
# Usage: build-tsan-caf.sh [PREFIX]   (default /var/cache/actorch/caf-tsan-0.17.6)
set -euo pipefail

version=0.17.6
prefix="${1:-${ACTORCH_CAF_TSAN_PREFIX:-/var/cache/actorch/caf-tsan-${version}}}"
if [ -f "${prefix}/.actorch-complete" ]; then
  echo "build-tsan-caf: ${prefix} is ready"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cd "${work}"

# The source package needs a deb-src entry: a copy of the machine's Debian sources with
# `Types: deb-src`, added once.
tarball="actor-framework_${version}.orig.tar.gz"
fetch() { apt-get source --download-only actor-framework >/dev/null 2>&1 || true; }
fetch
if [ ! -f "${tarball}" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-tsan-caf: need root to add a deb-src entry and apt-get update" >&2
    exit 1
  fi
  # Debian 12 keeps its sources either in deb822 form (debian.sources, as cloud images do) or
  # as one-line entries (sources.list, as the installer and debootstrap do).
  src=/etc/apt/sources.list.d/actorch-deb-src
  if [ ! -f "${src}.sources" ] && [ ! -f "${src}.list" ]; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "${src}.sources"
    elif grep -q '^deb ' /etc/apt/sources.list 2>/dev/null; then
      sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "${src}.list"
    else
      echo "build-tsan-caf: no Debian entry in /etc/apt to derive a deb-src entry from" >&2
      exit 1
    fi
  fi
  apt-get update -qq
  fetch
fi
# Only the orig tarball is needed (the .debian.tar.xz part may 404 on snapshot mirrors).
[ -f "${tarball}" ] || { echo "build-tsan-caf: could not fetch ${tarball}" >&2; exit 1; }
tar xf "${tarball}"
srcdir="$(find . -maxdepth 1 -type d -name 'actor-framework*' | head -1)"

# GCC 12 needs `-include limits` for libcaf_io. Only the libraries are built.
# Through ccache where there is one: CI's fresh root builds this each run, with a shared ccache.
# The build folder's name is new each time: paths are hashed relative to it, so runs share hits.
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${work}" CCACHE_NOHASHDIR=1
fi
cmake -S "${srcdir}" -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -include limits" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCAF_NO_EXAMPLES=ON -DCAF_NO_UNIT_TESTS=ON -DCAF_NO_OPENCL=ON -DCAF_NO_OPENSSL=ON \
  -DCAF_NO_TOOLS=ON -DCAF_NO_PYTHON=ON -DCMAKE_INSTALL_PREFIX="${prefix}" \
  -DCMAKE_INSTALL_LIBDIR=lib > cmake.log 2>&1 || { cat cmake.log; exit 1; }
ninja -C build -j "${ACTORCH_JOBS:-$(nproc)}"
mkdir -p "${prefix}"
ninja -C build install > /dev/null
touch "${prefix}/.actorch-complete"
echo "build-tsan-caf: installed into ${prefix}"
