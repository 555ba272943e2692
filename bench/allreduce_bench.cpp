// The `allreduce` workload of ../shared/bench/WORKLOADS.md: float32 SUM over `world` ranks on
// 127.0.0.1, 3 warm-ups then 20 timed iterations (5 at 64 MiB), one line per size from rank 0.
// Started without RANK in the environment, it forks its own ranks (comm/launch/launcher.hpp's
// spawn).
#include <chrono>
#include <cstdlib>
#include <iomanip>

#include "bench/bench.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "core/ops/factory.hpp"

namespace actorch::bench {

namespace {

void run_rank(const allreduce_options& opts, std::ostream& out) {
  dist::init_process_group({.backend = opts.backend, .timeout = std::chrono::seconds(60)});
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (int64_t nbytes : opts.sizes) {
    tensor t = ones({nbytes / 4});
    const int iters = nbytes <= (4 << 20) ? 20 : 5;
    for (int i = 0; i < 3; ++i)
      dist::all_reduce(t);
    dist::barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      dist::all_reduce(t);
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    if (rank == 0) {
      const double alg = double(nbytes) / dt / 1e9;
      out << "allreduce backend=" << opts.backend << " world=" << world << " bytes=" << nbytes
          << std::fixed << std::setprecision(1) << " time_us=" << dt * 1e6 << std::setprecision(3)
          << " algbw_GBps=" << alg << " busbw_GBps=" << alg * 2 * (world - 1) / world << std::endl;
      out.unsetf(std::ios::floatfield);
    }
  }
  dist::barrier();
  dist::destroy_process_group();
}

} // namespace

void run_as_ranks(int world, const std::function<void()>& rank) {
  if (std::getenv("RANK") != nullptr) { // started by `actorch launch`: be one rank
    rank();
    return;
  }
  ::setenv("MASTER_ADDR", "127.0.0.1", 0);
  if (std::getenv("MASTER_PORT") == nullptr)
    ::setenv("MASTER_PORT", std::to_string(dist::free_port()).c_str(), 1);
  dist::spawn([&](int) { rank(); }, world);
}

void run_allreduce(const allreduce_options& opts, std::ostream& out) {
  run_as_ranks(opts.world, [&] { run_rank(opts, out); });
}

} // namespace actorch::bench
