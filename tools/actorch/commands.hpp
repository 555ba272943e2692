// The subcommands of `actorch`, one registration function per file of tools/actorch/, so each
// layer adds its command without touching the others.
#pragma once

#include <CLI/CLI.hpp>

namespace actorch::cli {

/// `actorch bench NAME`: the workloads of bench/.
void add_bench(CLI::App& app);

} // namespace actorch::cli
