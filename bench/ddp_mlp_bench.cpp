// `actorch bench ddp-mlp`: the training step of WORKLOADS.md's ddp-mlp model. mode=single is
// one replica (world 1), the limit the data-parallel modes are measured against: forward,
// cross-entropy, backward and an SGD step on a fixed random batch, on the calling thread.
#include <chrono>

#include "bench/bench.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

namespace actorch::bench {

void run_ddp_mlp(const ddp_mlp_options& o, std::ostream& out) {
  generator gen(0);
  nn::sequential model{
      std::make_shared<nn::linear>(784, 1024, true, &gen), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(1024, 1024, true, &gen), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(1024, 10, true, &gen)};
  optim::sgd opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const tensor x = randn({o.batch, 784}, {}, &gen);
  const tensor y = randint(0, 10, {o.batch}, {}, &gen);
  double last_loss = 0;
  auto step = [&] {
    opt.zero_grad();
    const tensor loss = nn::functional::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    last_loss = loss.item<double>();
  };
  for (int64_t i = 0; i < o.warmup; ++i)
    step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i)
    step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                   double(o.steps);
  out << "ddp-mlp mode=" << o.mode << " world=" << o.world << " batch=" << o.batch
      << " ms_per_step=" << s * 1e3 << " samples_per_s=" << double(o.batch * o.world) / s
      << " loss=" << last_loss << std::endl;
}

} // namespace actorch::bench
