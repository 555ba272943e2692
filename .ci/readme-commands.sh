#!/usr/bin/env bash
# Runs the README's two Quick start commands as the README writes them, in the order given, and
# checks what the main command must leave behind: a "test accuracy" line at 0.95 or more, the
# checkpoint, the model for PyTorch, the metrics of every epoch and the plot. CI runs it inside
# its fresh Debian 12 root (.ci/fresh-root.sh), where nothing was installed before.
#
# Usage: .ci/readme-commands.sh main-first|test-first [PRESET...]
#   Presets given are appended to the test command; CI gives none, so it runs as written.
set -euo pipefail
cd "$(dirname "$0")/.."
order="${1:?usage: readme-commands.sh main-first|test-first [PRESET...]}"
shift
presets="$*"

# The commands are the first two lines of the README's Quick start block, comments cut off.
mapfile -t commands < <(awk '/^## Quick start/ {q = 1} q && /^```sh/ {b = 1; next}
  b && /^```/ {exit} b {sub(/[ \t]*#.*/, ""); if ($0 != "") print}' README.md)
if [ "${#commands[@]}" -ne 2 ]; then
  echo "readme-commands: the README's Quick start block has ${#commands[@]} commands, not 2:" \
    "${commands[*]}" >&2
  exit 1
fi
main_command="${commands[0]}"
test_command="${commands[1]}${presets:+ ${presets}}"

run_main() {
  echo "readme-commands: the main command: ${main_command}"
  local start=$SECONDS
  rm -rf digits-run
  bash -c "${main_command}" 2>&1 | tee build/main-command.log
  local line accuracy
  line="$(grep -o 'test accuracy [0-9.]*' build/main-command.log | tail -1)" ||
    { echo "readme-commands: the main command printed no 'test accuracy' line" >&2; exit 1; }
  accuracy="${line##* }"
  if ! awk -v a="${accuracy}" 'BEGIN { exit !(a >= 0.95) }'; then
    echo "readme-commands: the main job's test accuracy ${accuracy} is below 0.95" >&2
    exit 1
  fi
  for f in digits_ddp.safetensors model.safetensors test_indices.npy metrics.csv curves.png; do
    [ -s "digits-run/${f}" ] || { echo "readme-commands: digits-run/${f} is missing or empty" >&2; exit 1; }
  done
  local epochs
  epochs="$(($(wc -l < digits-run/metrics.csv) - 1))"
  [ "${epochs}" -eq 30 ] ||
    { echo "readme-commands: digits-run/metrics.csv has ${epochs} epochs, not 30" >&2; exit 1; }
  [ "$(head -c 8 digits-run/curves.png | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    { echo "readme-commands: digits-run/curves.png is not a PNG" >&2; exit 1; }
  echo "readme-commands: the main command passed in $((SECONDS - start)) s (test accuracy ${accuracy})"
}

run_tests() {
  echo "readme-commands: the test command: ${test_command}"
  local start=$SECONDS
  bash -c "${test_command}"
  # The whole suite ran, not part of it (a build tree configured without its tests, say): every
  # layer's tests are registered in each preset the command built.
  local preset layer listed
  for preset in ${presets:-release asan tsan}; do
    listed="$(ctest --test-dir "build/${preset}" -N)"
    for layer in core comm actors tools; do
      grep -Eq "Test +#[0-9]+: ${layer}:" <<< "${listed}" ||
        { echo "readme-commands: build/${preset} has no '${layer}' tests" >&2; exit 1; }
    done
  done
  echo "readme-commands: the test command passed in $((SECONDS - start)) s"
}

mkdir -p build
case "${order}" in
  main-first) run_main; run_tests ;;
  test-first) run_tests; run_main ;;
  *) echo "readme-commands: unknown order '${order}' (main-first or test-first)" >&2; exit 2 ;;
esac
