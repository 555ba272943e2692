#!/usr/bin/env bash
# `cmake --install` puts the package actorch where Debian's /usr/bin/python3 looks, for the
# prefixes /usr and /usr/local: staged under DESTDIR, the package's directory must be on the
# interpreter's own sys.path (minus DESTDIR), and importing it from there must load a loader.
# Usage: installed_package.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
for prefix in /usr /usr/local; do
  stage="$work/stage$prefix"
  DESTDIR="$work/stage" cmake --install "$build" --prefix "$prefix" > "$work/install.log"
  init=$(cd "$work/stage" && find . -path '*/actorch/__init__.py' | head -n 1)
  test -n "$init" || { echo "no actorch/__init__.py installed under $prefix"; exit 1; }
  site=$(dirname "$(dirname "${init#.}")")
  /usr/bin/python3 -c "import sys; assert '$site' in sys.path, ('$site', sys.path)" ||
    { echo "prefix $prefix: $site is not on /usr/bin/python3's sys.path"; exit 1; }
  PYTHONPATH="$work/stage$site" /usr/bin/python3 -c "
import actorch
assert actorch.__file__.startswith('$work/stage'), actorch.__file__
assert [b.tolist() for b in actorch.DataLoader(list(range(5)), batch_size=2)] == [[0, 1], [2, 3], [4]]
"
  echo "prefix $prefix: actorch in $site"
  rm -rf "$work/stage"
done
