// The subcommands of `actorch`, one registration function per file of tools/actorch/, so each
// layer adds its command without touching the others.
#pragma once

#include <CLI/CLI.hpp>

namespace actorch::cli {

/// `actorch bench NAME`: the workloads of bench/.
void add_bench(CLI::App& app);

/// `actorch launch --nproc-per-node N PROGRAM ARGS...`: torchrun's launcher
/// (comm/launch/launcher.hpp).
void add_launch(CLI::App& app);

/// `actorch step`: K training steps of an MLP from safetensors weights (parity with PyTorch).
void add_step(CLI::App& app);

} // namespace actorch::cli
