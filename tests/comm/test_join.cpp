// Join with uneven inputs: 3 ranks over Gloo holding different numbers of batches train to the
// model a single process computes by stepping on the active ranks' summed gradients over 3
// (torch's divide_by_initial_world_size), every rank ending with it; throw_on_early_termination
// stops every rank at the first exhausted one; enable=false is no join.
#include <catch2/catch.hpp>

#include "comm/ddp/join.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

std::shared_ptr<nn::sequential> model() {
  generator g(11);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(6, 5, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(5, 3, true, &g)});
}

// Rank r's batch t.
tensor loss_of(const std::function<tensor(const tensor&)>& forward, int r, int t) {
  generator g(1000 + 100 * uint64_t(r) + uint64_t(t));
  const tensor x = randn({4, 6}, {}, &g), y = randint(0, 3, {4}, {}, &g);
  return nn::functional::cross_entropy(forward(x), y);
}

std::vector<std::vector<double>> params_of(nn::module& m) {
  std::vector<std::vector<double>> out;
  for (const tensor& p : m.parameters())
    out.push_back(values_of(p));
  return out;
}

// One model stepped on the active ranks' summed gradients divided by the world size.
std::vector<std::vector<double>> reference(const std::vector<int>& batches, double lr) {
  auto m = model();
  const int world = int(batches.size());
  int steps = 0;
  for (int n : batches)
    steps = std::max(steps, n);
  for (int t = 0; t < steps; ++t) {
    for (tensor& p : m->parameters())
      p.set_grad(tensor());
    for (int r = 0; r < world; ++r)
      if (t < batches[size_t(r)])
        loss_of([&](const tensor& x) { return (*m)(x); }, r, t).backward();
    no_grad guard;
    for (tensor& p : m->parameters())
      if (p.grad().defined())
        p.sub_(p.grad().div(double(world)).mul(lr));
  }
  return params_of(*m);
}

std::vector<std::vector<std::vector<double>>> train(const std::vector<int>& batches, double lr) {
  return on_ranks<std::vector<std::vector<double>>>(
      int(batches.size()), [&](int r, process_group_gloo& pg) {
        distributed_data_parallel ddp(model(), replicas_of(pg));
        optim::sgd opt(ddp.module().parameters(), {.lr = lr});
        {
          join j({&ddp});
          for (int t = 0; t < batches[size_t(r)]; ++t) {
            opt.zero_grad();
            loss_of([&](const tensor& x) { return ddp(x); }, r, t).backward();
            opt.step();
          }
          j.finish();
        }
        return params_of(ddp.module());
      });
}

} // namespace

TEST_CASE("Join: ranks with 5, 7 and 9 batches train as one model on the active ranks' batches") {
  for (const std::vector<int>& batches :
       {std::vector<int>{5, 7, 9}, std::vector<int>{1, 4, 6}, std::vector<int>{9, 0, 3}}) {
    INFO("batches " << batches[0] << " " << batches[1] << " " << batches[2]);
    const auto want = reference(batches, 0.1);
    const auto got = train(batches, 0.1);
    for (const auto& rank : got) {
      REQUIRE(rank.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i)
        for (size_t k = 0; k < want[i].size(); ++k)
          REQUIRE(rank[i][k] == Approx(want[i][k]).margin(1e-6));
    }
  }
}

TEST_CASE("Join: throw_on_early_termination stops every rank at the first exhausted one") {
  const std::vector<int> batches{2, 3, 3};
  const auto errors = on_ranks<std::string>(3, [&](int r, process_group_gloo& pg) {
    distributed_data_parallel ddp(model(), replicas_of(pg));
    return error_of([&] {
      join j({&ddp}, true, /*throw_on_early_termination=*/true);
      for (int t = 0; t < batches[size_t(r)]; ++t)
        loss_of([&](const tensor& x) { return ddp(x); }, r, t).backward();
      j.finish();
    });
  });
  for (const std::string& e : errors)
    CHECK_THAT(e, Contains("Detected at least one rank that exhausted inputs"));
}

TEST_CASE("Join: one DDP, once, and enable=false changes nothing") {
  const auto errors = on_ranks<std::vector<std::string>>(2, [](int r, process_group_gloo& pg) {
    distributed_data_parallel ddp(model(), replicas_of(pg));
    std::vector<std::string> out;
    out.push_back(error_of([&] { join j({}); }));
    join j({&ddp}, /*enable=*/false);
    out.push_back(error_of([&] { join again({&ddp}); }));
    loss_of([&](const tensor& x) { return ddp(x); }, r, 0).backward(); // no count all-reduce
    j.finish();
    out.push_back(error_of([&] { j.finish(); }));
    return out;
  });
  for (const auto& e : errors) {
    CHECK_THAT(e[0], Contains("expected one DistributedDataParallel, got 0"));
    CHECK(e[1].empty()); // a disabled context does not hold the DDP
    CHECK_THAT(e[2], Contains("finish() was already called"));
  }
}
