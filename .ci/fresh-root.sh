#!/usr/bin/env bash
# Runs the README's two commands (.ci/readme-commands.sh: the main command, with its outputs
# checked, then the test command) in a fresh Debian 12 root of its own, on a clean clone of HEAD,
# so that CI fails when scripts/setup.sh misses a package that the main job, the build or the
# tests need (a development or CI machine may have it installed by hand; this root has only
# Debian's minbase).
#
# The root is a debootstrap minbase of bookworm with Debian 12's usual sources (bookworm,
# -updates, -security), cached as a tarball outside the tree; each run unpacks a new copy and
# removes it afterwards. The machine's CUDA folder is bind-mounted read-only, with
# /usr/local/cuda linking to it, so the CUDA code still compiles. ccache and apt's downloaded
# packages are shared with the machine; everything else the root needs, its own setup installs.
# Mounts live in a private mount namespace and processes in a pid namespace of their own, so
# both go when the run ends, however it ends (a CI timeout's signal included).
#
# Usage: .ci/fresh-root.sh [PRESET...]   (default: none given, so the test command runs as the
#   README writes it, every preset; presets given are appended to it)
# Environment: ACTORCH_CI_ORDER (main-first, the default, or test-first), ACTORCH_CI_CACHE
# (default /var/cache/actorch/ci), ACTORCH_DEBIAN_MIRROR, and ACTORCH_CI_KEEP_ROOT=1 to keep
# the root afterwards (for a look inside; remove it by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-root: needs root (debootstrap, chroot and mounts)" >&2
  exit 1
fi
bash scripts/setup.sh ci

cache="${ACTORCH_CI_CACHE:-/var/cache/actorch/ci}"
mirror="${ACTORCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tarball="${cache}/debian12-minbase.tar.gz"
ccache_dir="$(ccache -k cache_dir)"
mkdir -p "${cache}/apt-archives" "${ccache_dir}"

if [ ! -f "${tarball}" ]; then
  echo "fresh-root: debootstrap of a Debian 12 minbase into ${tarball} (once)"
  base="$(mktemp -d /var/tmp/actorch-debootstrap.XXXXXX)"
  trap 'rm -rf --one-file-system "${base}"' EXIT
  debootstrap --variant=minbase --cache-dir="${cache}/apt-archives" bookworm "${base}" "${mirror}" \
    > "${cache}/debootstrap.log" 2>&1 || { tail -30 "${cache}/debootstrap.log"; exit 1; }
  # The sources of a Debian 12 cloud image, in place of debootstrap's single line.
  rm -f "${base}/etc/apt/sources.list"
  cat > "${base}/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -f "${base}/var/lib/apt/lists"/*_Packages
  tar -C "${base}" -czf "${tarball}.part" .
  mv "${tarball}.part" "${tarball}"
  rm -rf --one-file-system "${base}"
  trap - EXIT
fi

root="$(mktemp -d /var/tmp/actorch-fresh-root.XXXXXX)"
inner=""
# Stops the root's processes, if any are left, then removes the root. unshare blocks SIGTERM
# while it waits for its child, so it gets SIGKILL, and --kill-child takes the whole pid
# namespace with it; the root is removed once no process runs inside it any more.
cleanup() {
  if [ -n "${inner}" ]; then kill -KILL "${inner}" 2>/dev/null || true; fi
  for _ in $(seq 100); do
    busy=0
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "${root}" ] && { busy=1; break; }
    done
    [ "${busy}" = 0 ] && break
    sleep 0.1
  done
  if [ -z "${ACTORCH_CI_KEEP_ROOT:-}" ]; then rm -rf --one-file-system "${root}"; fi
}
trap cleanup EXIT
tar -C "${root}" -xzf "${tarball}"
git clone -q --no-hardlinks "${repo}" "${root}/src/actorch"
echo "fresh-root: a fresh Debian 12 root in ${root}, clone of $(git -C "${repo}" rev-parse --short HEAD)"
cp /etc/resolv.conf /etc/hosts "${root}/etc/"

cuda=""
if [ -e /usr/local/cuda ]; then cuda="$(readlink -f /usr/local/cuda)"; fi
presets="$*"
order="${ACTORCH_CI_ORDER:-main-first}"

# The root runs the README's commands in the order asked, the test command with the presets
# given. They run in the background so that a signal to this script is handled at once (bash
# defers traps while a foreground child runs): the EXIT trap's cleanup then stops it and
# removes the root.
unshare --mount --propagation private --pid --fork --kill-child -- bash -euo pipefail -s \
  "${root}" "${cuda}" "${ccache_dir}" "${cache}/apt-archives" "${order}" "${presets}" <<'INNER' &
root="$1" cuda="$2" ccache_dir="$3" archives="$4" order="$5" presets="$6"
# The root a mount point of its own: `ip netns exec` (the two-hosts test) remounts / as a
# slave, which fails on a plain directory. The machine's cgroup tree: the store attack test
# caps its master's memory in a cgroup of its own. Both tests skip without them.
mount --bind "${root}" "${root}"
mount -t proc proc "${root}/proc"
mount -t sysfs sysfs "${root}/sys"
if [ -d /sys/fs/cgroup ]; then mount --rbind /sys/fs/cgroup "${root}/sys/fs/cgroup"; fi
mount --rbind /dev "${root}/dev"
if [ -n "${cuda}" ]; then
  mkdir -p "${root}${cuda}"
  mount --bind "${cuda}" "${root}${cuda}"
  mount -o remount,bind,ro "${root}${cuda}"
  ln -sfn "${cuda}" "${root}/usr/local/cuda"
fi
mkdir -p "${root}/root/.cache/ccache" "${root}/var/cache/apt/archives"
mount --bind "${ccache_dir}" "${root}/root/.cache/ccache"
mount --bind "${archives}" "${root}/var/cache/apt/archives"
exec chroot "${root}" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd /src/actorch && bash .ci/readme-commands.sh ${order} ${presets}"
INNER
inner=$!
trap 'exit 143' TERM
trap 'exit 130' INT
wait "${inner}"
