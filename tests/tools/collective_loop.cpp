// A rank that runs collectives until told to stop, for the two-host tests
// (tests/tools/two_hosts.py): env:// from the environment, the group's timeout from
// ACTORCH_TEST_TIMEOUT_MS; prints "looping" once its first all_reduce completed, then runs
// all_reduce and a DDP step in turn until SIGTERM (exit 0) or an error (its message, exit 1).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/distributed.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_term(int) {
  g_stop = 1;
}
} // namespace

int main() try {
  using namespace actorch;
  std::signal(SIGTERM, on_term);
  const char* t = std::getenv("ACTORCH_TEST_TIMEOUT_MS");
  dist::init_process_group(
      {.timeout = std::chrono::milliseconds(t != nullptr ? std::atol(t) : 5000)});
  const int rank = dist::get_rank();
  generator g(uint64_t(rank) + 1);
  auto model = std::make_shared<nn::linear>(16, 4, true, &g);
  dist::distributed_data_parallel ddp(model, dist::process_replicas(dist::world()));
  optim::sgd opt(model->parameters(), {.lr = 0.01});
  tensor x = ones({1 << 16});
  dist::all_reduce(x);
  std::printf("rank %d looping (all_reduce gave %g)\n", rank, x[0].item<double>());
  std::fflush(stdout);
  while (g_stop == 0) {
    x.fill_(1.0);
    dist::all_reduce(x);
    opt.zero_grad();
    nn::functional::mse_loss(ddp(randn({8, 16}, {}, &g)), zeros({8, 4})).backward();
    opt.step();
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "collective_loop: %s\n", e.what());
  return 1;
}
