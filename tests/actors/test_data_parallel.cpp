// nn::data_parallel (actors/data_parallel.hpp) against the same model run without it: outputs,
// loss, parameter and input gradients, optimizer steps; uneven and small batches; BatchNorm's
// statistics from the first replica; an exception in a replica, named; the free functions
// scatter, replicate, parallel_apply and gather.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <future>
#include <thread>

#include "actors/data_parallel.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {

std::shared_ptr<nn::sequential> mlp(uint64_t seed) {
  generator g(seed);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(6, 8, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(8, 3, true, &g)});
}

std::vector<std::vector<double>> grads_of(const nn::module& m) {
  std::vector<std::vector<double>> out;
  for (const tensor& p : m.parameters())
    out.push_back(values_of(p.grad()));
  return out;
}

void require_close(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double tol = 1e-5) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i);
    REQUIRE(close(a[i], b[i], tol));
  }
}

// Throws when its input holds a negative value: the replica whose chunk has one fails.
struct picky : nn::module {
  tensor forward(const tensor& x) override {
    ACTORCH_CHECK(x.min().item<double>() >= 0, "picky: a negative input");
    return x * 2;
  }
  std::string name() const override { return "Picky"; }
  std::shared_ptr<nn::module> clone() const override {
    return copy_state_into(std::make_shared<picky>());
  }
};

struct no_clone : nn::module {
  std::string name() const override { return "NoClone"; }
};

} // namespace

TEST_CASE("data_parallel gives the loss and gradients of the model run without it",
          "[actors][data_parallel]") {
  for (const int64_t batch : {10, 9, 2}) { // chunks 4+4+2, 3+3+3, and 1+1 of 3 replicas
    INFO("batch " << batch);
    generator g{uint64_t(batch)};
    const tensor x = randn({batch, 6}, {}, &g);
    const tensor y = randint(0, 3, {batch}, {}, &g);
    auto plain = mlp(1);
    const tensor xp = x.clone().requires_grad_();
    const tensor loss_plain = nn::functional::cross_entropy((*plain)(xp), y);
    loss_plain.backward();

    auto model = mlp(1);
    nn::data_parallel dp(model, {0, 1, 2});
    const tensor xd = x.clone().requires_grad_();
    const tensor out = dp(xd);
    CHECK(out.sizes() == shape_t{batch, 3});
    CHECK(out.grad_fn()->name() == "DataParallelBackward");
    const tensor loss = nn::functional::cross_entropy(out, y);
    CHECK(loss.item<double>() == Approx(loss_plain.item<double>()).epsilon(1e-6));
    loss.backward();
    require_close(grads_of(*model), grads_of(*plain));
    CHECK(close(values_of(xd.grad()), values_of(xp.grad()), 1e-6));
  }
}

TEST_CASE("an optimizer over the module's parameters steps as without data_parallel",
          "[actors][data_parallel]") {
  auto plain = mlp(2), model = mlp(2);
  optim::sgd opt_plain(plain->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::sgd opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::data_parallel dp(model, {0, 1});
  generator g(3);
  for (int step = 0; step < 3; ++step) {
    const tensor x = randn({7, 6}, {}, &g);
    const tensor y = randint(0, 3, {7}, {}, &g);
    opt_plain.zero_grad();
    nn::functional::cross_entropy((*plain)(x), y).backward();
    opt_plain.step();
    opt.zero_grad();
    nn::functional::cross_entropy(dp(x), y).backward(); // the replicas follow each step
    opt.step();
  }
  std::vector<std::vector<double>> a, b;
  for (const tensor& p : model->parameters())
    a.push_back(values_of(p));
  for (const tensor& p : plain->parameters())
    b.push_back(values_of(p));
  require_close(a, b);
  // No gradient is left on the replicas, and evaluation under no_grad records nothing.
  no_grad guard;
  CHECK_FALSE(dp(randn({4, 6}, {}, &g)).requires_grad());
}

TEST_CASE("data_parallel keeps the first replica's BatchNorm statistics, as torch's device[0]",
          "[actors][data_parallel]") {
  auto model = std::make_shared<nn::sequential>(
      std::initializer_list<std::shared_ptr<nn::module>>{std::make_shared<nn::batch_norm1d>(2)});
  nn::data_parallel dp(model, {0, 1});
  const tensor x = tensor_of({{1.0, 0.0}, {3.0, 4.0}, {10.0, 20.0}, {30.0, 40.0}});
  dp(x);
  // The first chunk's rows (1, 3) and (0, 4): batch means 2 and 2, unbiased variances 2 and 8.
  const auto& bn = dynamic_cast<const nn::batch_norm_base&>(*(*model)[0]);
  CHECK(close(values_of(bn.running_mean), {0.2, 0.2}));
  CHECK(close(values_of(bn.running_var), {0.9 + 0.2, 0.9 + 0.8}));
  model->eval(); // the replicas follow the module's mode: running statistics now
  const tensor e = dp(tensor_of({{0.2, 0.2}, {0.2, 0.2}}));
  CHECK(close(values_of(e), {0, 0, 0, 0}, 1e-4));
}

TEST_CASE("replicas and clones keep each submodule's mode: a BatchNorm left in eval inside a "
          "model in train",
          "[actors][data_parallel]") {
  auto bn = std::make_shared<nn::batch_norm1d>(2);
  auto model =
      std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{bn});
  model->train();
  bn->eval();
  const auto copy = model->clone();
  CHECK(copy->is_training());
  CHECK_FALSE((*std::dynamic_pointer_cast<nn::sequential>(copy))[0]->is_training());
  nn::data_parallel dp(model, {0, 1});
  const tensor x = tensor_of({{1.0, 0.0}, {3.0, 4.0}, {10.0, 20.0}, {30.0, 40.0}});
  const tensor y = dp(x);
  // Running statistics (mean 0, variance 1) normalise, and nothing updates them.
  CHECK(close(values_of(y), values_of(x.div(std::sqrt(1 + 1e-5))), 1e-6));
  CHECK(values_of(bn->running_mean) == std::vector<double>{0, 0});
}

TEST_CASE("an exception in a replica is rethrown naming the replica and its device",
          "[actors][data_parallel]") {
  nn::data_parallel dp(std::make_shared<picky>(), {0, 1, 2});
  CHECK(values_of(dp(tensor_of({1.0, 2.0, 3.0}))) == std::vector<double>{2, 4, 6});
  REQUIRE_THROWS_WITH(dp(tensor_of({1.0, -2.0, 3.0})),
                      Contains("DataParallel: caught an error in replica 1 on device cpu:1: "
                               "picky: a negative input"));
  CHECK(values_of(dp(tensor_of({4.0, 5.0}))) == std::vector<double>{8, 10}); // still usable
  nn::data_parallel none(std::make_shared<no_clone>(), {0, 1});
  REQUIRE_THROWS_WITH(none(ones({2})), Contains("NoClone has no clone()"));
  REQUIRE_THROWS_WITH(nn::data_parallel(mlp(1), {0, 0}), Contains("device id 0 is given twice"));
  REQUIRE_THROWS_WITH(nn::data_parallel(mlp(1), {0, 1}, 3),
                      Contains("output_device 3 is not one of the device_ids"));
  REQUIRE_THROWS_WITH(dp(zeros({0})), Contains("cannot split an empty or 0-dim input"));
}

TEST_CASE("scatter, replicate, parallel_apply and gather, as torch.nn.parallel's",
          "[actors][data_parallel]") {
  const tensor x = arange(10.0).view({5, 2});
  const auto chunks = nn::parallel::scatter(x, 3);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].sizes() == shape_t{2, 2});
  CHECK(chunks[2].sizes() == shape_t{1, 2});
  CHECK(nn::parallel::scatter(x, 8).size() == 5); // at most one row each
  CHECK(nn::parallel::scatter(x, 2, 1).size() == 2);

  auto model = mlp(4);
  const auto replicas = nn::parallel::replicate(*model, 2);
  REQUIRE(replicas.size() == 2);
  const tensor w = model->parameters()[0];
  const tensor w1 = replicas[1]->parameters()[0];
  CHECK(values_of(w1) == values_of(w));
  CHECK(w1.data_ptr() != w.data_ptr()); // a copy of its own
  CHECK(w1.requires_grad());

  const tensor in = randn({6, 6});
  const auto parts = nn::parallel::scatter(in, 2);
  const auto outs = nn::parallel::parallel_apply(replicas, parts);
  CHECK(close(values_of(nn::parallel::gather(outs)), values_of((*model)(in)), 1e-6));
  REQUIRE_THROWS_WITH(nn::parallel::parallel_apply(replicas, {in}),
                      Contains("parallel_apply: 2 modules but 1 inputs"));
}

TEST_CASE("data_parallel built and run on one thread may be destroyed on another",
          "[actors][data_parallel]") {
  // Its actor system waited without end for the builder's thread to exit (Note [CAF's
  // per-thread logger] in actors/thread_scope.hpp). The builder lives on here until the
  // destruction is done or has taken 30 s, so the old hang fails instead of stopping the suite.
  std::promise<std::unique_ptr<nn::data_parallel>> built;
  std::promise<void> release;
  std::thread builder([&] {
    auto dp = std::make_unique<nn::data_parallel>(mlp(4), std::vector<int>{0, 1});
    generator g(5);
    (*dp)(randn({4, 6}, {}, &g));
    built.set_value(std::move(dp));
    release.get_future().wait();
  });
  auto dp = built.get_future().get();
  auto destroyed = std::async(std::launch::async, [&] { dp.reset(); });
  const bool in_time = destroyed.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release.set_value();
  builder.join();
  REQUIRE(in_time);
}
