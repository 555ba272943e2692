// ZeroRedundancyOptimizer over Gloo: DDP with the sharded optimizer gives the parameters of DDP
// with the plain one, bit for bit, for SGD with momentum and Adam at worlds 2 and 3; the
// partition is torch's; the consolidated state is the plain optimizer's state_dict, and it
// loads into a sharded optimizer at another world size, which goes on as the plain one does.
#include <catch2/catch.hpp>

#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/ddp/zero_redundancy_optimizer.hpp"
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
using Catch::StartsWith;

namespace {

std::shared_ptr<nn::sequential> model() {
  generator g(21);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(7, 9, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(9, 5, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(5, 3, true, &g)});
}

tensor loss_of(distributed_data_parallel& ddp, int r, int t) {
  generator g(500 + 10 * uint64_t(r) + uint64_t(t));
  const tensor x = randn({6, 7}, {}, &g), y = randint(0, 3, {6}, {}, &g);
  return nn::functional::cross_entropy(ddp(x), y);
}

optimizer_factory factory(bool adam) {
  return [adam](std::vector<tensor> ps) -> std::unique_ptr<optim::optimizer> {
    if (adam)
      return std::make_unique<optim::adam>(std::move(ps), optim::adam_options{.lr = 0.01});
    return std::make_unique<optim::sgd>(std::move(ps),
                                        optim::sgd_options{.lr = 0.05, .momentum = 0.9});
  };
}

struct outcome {
  std::vector<std::vector<double>> params;
  optim::optimizer_state state; // consolidated (rank 0) or the plain optimizer's
};

// `steps` DDP steps at `world` with the sharded or the plain optimizer, from `load` if given.
std::vector<outcome> train(int world, bool sharded, bool adam, int steps, int first_step = 0,
                           const optim::optimizer_state* load = nullptr,
                           const std::vector<std::vector<double>>* start = nullptr) {
  return on_ranks<outcome>(world, [&](int r, process_group_gloo& pg) {
    distributed_data_parallel ddp(model(), replicas_of(pg));
    if (start) {
      no_grad guard;
      auto ps = ddp.module().parameters();
      for (size_t i = 0; i < ps.size(); ++i)
        ps[i].copy_(as_tensor((*start)[i], ps[i].sizes(), {}));
    }
    std::unique_ptr<zero_redundancy_optimizer> zero;
    std::unique_ptr<optim::optimizer> plain;
    if (sharded)
      zero = std::make_unique<zero_redundancy_optimizer>(ddp.module().parameters(), factory(adam),
                                                         ddp.group_ptr());
    else
      plain = factory(adam)(ddp.module().parameters());
    if (load) {
      if (zero)
        zero->load_state_dict(*load);
      else
        plain->load_state_dict(*load);
    }
    for (int t = first_step; t < first_step + steps; ++t) {
      zero ? zero->zero_grad() : plain->zero_grad();
      loss_of(ddp, r, t).backward();
      zero ? zero->step() : plain->step();
    }
    outcome o;
    for (const tensor& p : ddp.module().parameters())
      o.params.push_back(values_of(p));
    if (zero) {
      zero->consolidate_state_dict(0);
      if (r == 0)
        o.state = zero->state_dict();
    } else {
      o.state = plain->state_dict();
    }
    return o;
  });
}

void require_same_state(const optim::optimizer_state& a, const optim::optimizer_state& b) {
  REQUIRE(a.metadata == b.metadata);
  REQUIRE(a.tensors.size() == b.tensors.size());
  std::map<std::string, std::vector<double>> want;
  for (const auto& [k, t] : b.tensors)
    want[k] = values_of(t);
  for (const auto& [k, t] : a.tensors) {
    INFO(k);
    REQUIRE(want.count(k));
    REQUIRE(values_of(t) == want[k]);
  }
}

} // namespace

TEST_CASE("ZeroRedundancyOptimizer partitions by size as torch's") {
  const std::vector<tensor> ps{zeros({10}), zeros({3, 4}), zeros({5}), zeros({12}), zeros({2})};
  // Sorted by size, stable: 12 (idx 1), 12 (idx 3), 10 (0), 5 (2), 2 (4); each to the rank
  // with the fewest elements (the lower among equals): r0 12, r1 12, r0 22, r1 17, r1 19.
  CHECK(partition_parameters(ps, 2) == std::vector<std::vector<size_t>>{{1, 0}, {3, 2, 4}});
  CHECK(partition_parameters(ps, 3) == std::vector<std::vector<size_t>>{{1, 4}, {3}, {0, 2}});
  CHECK(partition_parameters(ps, 7).size() == 7); // some ranks own nothing
}

TEST_CASE("ZeroRedundancyOptimizer: the parameters of the unsharded step, bit for bit") {
  for (bool adam : {false, true})
    for (int world : {2, 3}) {
      INFO((adam ? "Adam" : "SGD") << ", world " << world);
      const auto plain = train(world, false, adam, 4);
      const auto sharded = train(world, true, adam, 4);
      for (int r = 0; r < world; ++r)
        REQUIRE(sharded[size_t(r)].params == plain[0].params);
      // The consolidated state is the plain optimizer's state_dict.
      require_same_state(sharded[0].state, plain[0].state);
    }
}

TEST_CASE("ZeroRedundancyOptimizer: a state saved at world 3 loads at world 2 and goes on") {
  const auto first = train(3, true, true, 3);
  const auto plain_first = train(3, false, true, 3);
  // Three more steps at world 2 from the saved parameters and state, sharded and plain.
  const auto sharded = train(2, true, true, 3, 3, &first[0].state, &first[0].params);
  const auto plain = train(2, false, true, 3, 3, &plain_first[0].state, &plain_first[0].params);
  for (const auto& o : sharded)
    REQUIRE(o.params == plain[0].params);
}

TEST_CASE("ZeroRedundancyOptimizer: the state is only where it was consolidated") {
  const auto errors = on_ranks<std::string>(2, [](int r, process_group_gloo& pg) {
    distributed_data_parallel ddp(model(), replicas_of(pg));
    zero_redundancy_optimizer opt(ddp.module().parameters(), factory(false), ddp.group_ptr());
    loss_of(ddp, r, 0).backward();
    opt.step();
    opt.consolidate_state_dict(1);
    std::string e = error_of([&] { (void)opt.state_dict(); });
    optim::optimizer_state wrong;
    wrong.metadata["param_groups.0.params"] = "2";
    e += "|" + error_of([&] { opt.load_state_dict(wrong); });
    return e;
  });
  CHECK_THAT(errors[0], Contains("Optimizer state has not been consolidated on this rank") &&
                            Contains("the state covers 2 parameters, this optimizer has 6"));
  CHECK_THAT(errors[1], StartsWith("|"));
}
