// The `actorch` command line. Subcommands: bench (the workloads of bench/). Later issues add
// launch, step and train.
#include <iostream>

#include <CLI/CLI.hpp>

#include "bench/bench.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"actorch: an actor-based runtime for deep-learning training"};
  app.require_subcommand(1);

  auto* bench = app.add_subcommand("bench", "run a benchmark workload (bench/)");
  bench->require_subcommand(1);
  actorch::bench::tensor_options tensor_opts;
  auto* tensor_cmd = bench->add_subcommand("tensor", "GEMM GFLOP/s, add and memcpy GB/s");
  tensor_cmd->add_option("--size", tensor_opts.gemm_size, "GEMM M = N = K")
      ->check(CLI::Range(1, 16384));
  tensor_cmd->add_option("--bytes", tensor_opts.add_bytes, "bytes of each add operand")
      ->check(CLI::Range(int64_t(4), int64_t(1) << 34));
  tensor_cmd->add_option("--min-seconds", tensor_opts.min_seconds, "time per measurement")
      ->check(CLI::Range(0.0, 60.0));
  tensor_cmd->callback([&] { actorch::bench::run_tensor(tensor_opts, std::cout); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const actorch::error& e) {
    std::cerr << "actorch: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
