// distributed_data_parallel and its reducer over process groups (ranks as threads): bucket
// assignment, averaged gradients against gradients computed here without DDP, bucket order and
// overlap with backward, no_sync, unused parameters, and construction errors.
#include <catch2/catch.hpp>

#include <mutex>
#include <thread>

#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/ddp/sync_batch_norm.hpp"
#include "comm/ddp/zero_redundancy_optimizer.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "core/autograd/node.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "tests/comm/ports.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/gpu.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

std::shared_ptr<nn::sequential> mlp(uint64_t seed, int64_t in = 6, int64_t hidden = 5) {
  generator g(seed);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(in, hidden, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(hidden, 3, true, &g)});
}

// Rank r's batch: 4 samples that differ by rank.
std::pair<tensor, tensor> batch_of(int r, int64_t in = 6) {
  generator g(100 + uint64_t(r));
  return {randn({4, in}, {}, &g), randint(0, 3, {4}, {}, &g)};
}

std::vector<std::vector<double>> grads_of(const nn::module& m) {
  std::vector<std::vector<double>> out;
  for (const tensor& p : m.parameters())
    out.push_back(p.grad().defined() ? values_of(p.grad()) : std::vector<double>{});
  return out;
}

// The gradients DDP should produce: the mean over ranks of each rank's own gradient, computed
// on one thread from the same initial model (rank 0's) with no DDP involved.
std::vector<std::vector<double>> expected_average(int world) {
  std::vector<std::vector<double>> sum;
  for (int r = 0; r < world; ++r) {
    auto m = mlp(0);
    auto [x, y] = batch_of(r);
    nn::functional::cross_entropy((*m)(x), y).backward();
    const auto g = grads_of(*m);
    if (sum.empty())
      sum.assign(g.size(), {});
    for (size_t i = 0; i < g.size(); ++i) {
      sum[i].resize(g[i].size(), 0.0);
      for (size_t k = 0; k < g[i].size(); ++k)
        sum[i][k] += g[i][k] / world;
    }
  }
  return sum;
}

void require_close(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double tol = 1e-6) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k)
      REQUIRE(a[i][k] == Approx(b[i][k]).margin(tol));
  }
}

} // namespace

TEST_CASE("bucket assignment: reverse order, a small first bucket, one bucket set per dtype") {
  // float32 sizes in elements; 1 KiB = 256 floats.
  std::vector<tensor> p{zeros({300}), zeros({10}), zeros({200}),
                        zeros({600}), zeros({50}), zeros({100}, {.dtype = dtype::float64})};
  // Order 5 4 3 2 1 0; caps: first 1 KiB, then 2 KiB.
  const auto b = compute_bucket_assignment(p, {5, 4, 3, 2, 1, 0}, 1024, 2048);
  // float32: 4 (200 B) + 3 (2400 B) closes the first bucket (>= 1 KiB); 2 (800 B) + 1 (40 B) +
  // 0 (1200 B) = 2040 B stays open until the end. float64: 5 (800 B) stays open.
  REQUIRE(b == std::vector<std::vector<size_t>>{{4, 3}, {2, 1, 0}, {5}});
  REQUIRE(error_of([&] { compute_bucket_assignment(p, {6}, 1, 1); }).find("index 6") !=
          std::string::npos);
}

TEST_CASE("bucket assignment: a module on several devices gets buckets per device") {
  // torch's demo_model_parallel: layers alternating between two GPUs. Described, not allocated,
  // so that a machine without GPUs checks the assignment.
  const device g0("cuda:0"), g1("cuda:1");
  const std::vector<bucket_param> p{{dtype::float32, g0, 400}, {dtype::float32, g1, 400},
                                    {dtype::float32, g0, 800}, {dtype::float32, g1, 100},
                                    {dtype::float64, g1, 100}, {dtype::float32, g0, 300}};
  // Reverse order 5..0, first cap 1000 B, then 1000 B. cuda:0 float32: 5 (300) + 2 (800)
  // closes at 1100; 0 (400) stays open. cuda:1 float32: 3 (100) + 1 (400) stays open; cuda:1
  // float64: 4.
  const auto b = compute_bucket_assignment(p, {5, 4, 3, 2, 1, 0}, 1000, 1000);
  REQUIRE(b == std::vector<std::vector<size_t>>{{5, 2}, {0}, {3, 1}, {4}});
  for (const auto& bucket : b)
    for (size_t i : bucket) {
      REQUIRE(p[i].dev == p[bucket[0]].dev);
      REQUIRE(p[i].type == p[bucket[0]].type);
    }
}

TEST_CASE("device_ids and output_device follow torch's rules") {
  const device cpu("cpu"), g0("cuda:0"), g1("cuda:1");
  // A module on one GPU: device_ids names it; output_device defaults to it.
  CHECK(resolve_ddp_devices({g1}, {g1}, std::nullopt) == g1);
  CHECK(resolve_ddp_devices({g1}, {g1}, g0) == g0);
  CHECK_FALSE(resolve_ddp_devices({g1}, {}, std::nullopt).has_value());
  // CPU modules and multi-device modules take neither argument (torch's message).
  CHECK_FALSE(resolve_ddp_devices({cpu}, {}, std::nullopt).has_value());
  CHECK_FALSE(resolve_ddp_devices({g0, g1}, {}, std::nullopt).has_value());
  const std::string only_with = "device_ids and output_device arguments only work with "
                                "single-device/multiple-device GPU modules or CPU modules";
  CHECK_THROWS_WITH(resolve_ddp_devices({g0, g1}, {g0}, std::nullopt),
                    Contains(only_with) && Contains("device_ids [cuda:0], output_device None") &&
                        Contains("module parameters {cuda:0, cuda:1}"));
  CHECK_THROWS_WITH(resolve_ddp_devices({cpu}, {}, g0),
                    Contains(only_with) && Contains("output_device cuda:0"));
  CHECK_THROWS_WITH(resolve_ddp_devices({g0}, {g0, g1}, std::nullopt),
                    Contains("device_ids can only be None or contain a single element"));
  CHECK_THROWS_WITH(resolve_ddp_devices({cpu, g0}, {}, std::nullopt),
                    Contains("input module must be on the same type of devices") &&
                        Contains("{cpu, cuda:0}"));
  CHECK_THROWS_WITH(resolve_ddp_devices({g0}, {g1}, std::nullopt),
                    Contains("device_ids [cuda:1] is not the device of the module's parameters"));
}

TEST_CASE("DDP refuses device_ids for a CPU module on every rank, as torch does") {
  const auto errors = on_ranks<std::string>(2, [](int, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    return error_of(
        [&] { distributed_data_parallel ddp(mlp(0), group, {.device_ids = {device("cuda:0")}}); });
  });
  for (const std::string& e : errors)
    CHECK_THAT(e, Contains("device_ids and output_device arguments only work with"));
}

TEST_CASE("DDP over a Gloo group averages the replicas' gradients") {
  const auto want = expected_average(3);
  const auto got = on_ranks<std::vector<std::vector<double>>>(3, [](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    // Different initial values per rank: construction broadcasts rank 0's.
    distributed_data_parallel ddp(mlp(uint64_t(r)), group);
    auto [x, y] = batch_of(r);
    nn::functional::cross_entropy(ddp(x), y).backward();
    return grads_of(ddp.module());
  });
  for (const auto& g : got)
    require_close(g, want);
}

TEST_CASE("DDP: buckets launch in index order and the first is reduced before backward ends") {
  struct seen {
    std::vector<size_t> ready;
    std::chrono::steady_clock::time_point ready_time0;
    std::vector<bucket_event> reduced;
    std::chrono::steady_clock::time_point last_hook;
    size_t buckets = 0;
  };
  const auto results = on_ranks<seen>(2, [](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    // A large first layer: its weight gradient (the last to be ready, a [512 x 512] x
    // [512 x 4096] GEMM, tens of ms) takes far longer than exchanging the first bucket (the
    // last two layers, about 1 MiB), even under TSan, which slows the exchange but not BLAS.
    generator g(1);
    auto m = std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
        std::make_shared<nn::linear>(4096, 512, true, &g), std::make_shared<nn::relu>(),
        std::make_shared<nn::linear>(512, 512, true, &g), std::make_shared<nn::relu>(),
        std::make_shared<nn::linear>(512, 10, true, &g)});
    distributed_data_parallel ddp(m, group, {.bucket_cap_mb = 1});
    seen s;
    std::mutex mu;
    ddp.reducer().set_observer([&](const bucket_event& e) {
      std::lock_guard lock(mu);
      if (e.kind == bucket_event::ready) {
        if (e.bucket == 0)
          s.ready_time0 = e.time;
        s.ready.push_back(e.bucket);
      } else
        s.reduced.push_back(e);
    });
    // The first layer's weight is the last gradient backward produces.
    m->parameters().front().register_post_accumulate_grad_hook(
        [&](const tensor&) { s.last_hook = std::chrono::steady_clock::now(); });
    generator dg(10 + uint64_t(r));
    const tensor x = randn({512, 4096}, {}, &dg);
    const tensor y = randint(0, 10, {512}, {}, &dg);
    nn::functional::cross_entropy(ddp(x), y).backward();
    s.buckets = ddp.reducer().buckets().size();
    return s;
  });
  for (const seen& s : results) {
    REQUIRE(s.buckets >= 2);
    REQUIRE(s.ready.size() == s.buckets);
    for (size_t b = 0; b < s.ready.size(); ++b)
      REQUIRE(s.ready[b] == b);
    REQUIRE(s.reduced.size() == s.buckets);
  }
  // Overlap, seen from the rank whose part of bucket 0 came last (the other may run ahead by
  // a scheduling quantum on a loaded machine): right after its hook completed the bucket, the
  // exchange ran while its backward went on computing the first layer's weight gradient.
  const seen& late = results[0].ready_time0 > results[1].ready_time0 ? results[0] : results[1];
  const auto first = std::find_if(late.reduced.begin(), late.reduced.end(),
                                  [](const bucket_event& e) { return e.bucket == 0; });
  REQUIRE(first != late.reduced.end());
  INFO(("bucket 0 reduced " +
        std::to_string(
            std::chrono::duration<double, std::micro>(late.last_hook - first->time).count()) +
        " us before the last hook"));
  CHECK(first->time < late.last_hook);
}

TEST_CASE("DDP: buckets are rebuilt once, from rank 0's ready order, identically everywhere") {
  // Catch2's assertions are not thread-safe: each rank returns what it saw.
  struct seen {
    bool rebuilt_after_first = true, rebuilt_at_end = false;
    std::vector<std::vector<size_t>> buckets;
    bool operator==(const seen&) const = default;
  };
  const auto got = on_ranks<seen>(2, [](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    distributed_data_parallel ddp(mlp(0, 64, 64), group,
                                  {.bucket_cap_mb = 64.0 * 4 / (1024 * 1024)});
    auto [x, y] = batch_of(r, 64);
    seen s;
    for (int it = 0; it < 3; ++it) {
      ddp.module().zero_grad();
      nn::functional::cross_entropy(ddp(x), y).backward();
      if (it == 0)
        s.rebuilt_after_first = ddp.reducer().buckets_rebuilt();
    }
    s.rebuilt_at_end = ddp.reducer().buckets_rebuilt();
    s.buckets = ddp.reducer().buckets();
    return s;
  });
  REQUIRE_FALSE(got[0].rebuilt_after_first);
  REQUIRE(got[0].rebuilt_at_end);
  REQUIRE(got[0] == got[1]);
  size_t n = 0;
  for (const auto& b : got[0].buckets)
    n += b.size();
  REQUIRE(n == 4);
}

TEST_CASE("DDP no_sync accumulates locally, and the next synchronised backward averages the sums") {
  std::vector<int> sync_inside(2, -1), sync_after(2, -1);
  const auto got =
      on_ranks<std::vector<std::vector<double>>>(2, [&](int r, process_group_gloo& pg) {
        auto group = replicas_of(pg);
        distributed_data_parallel ddp(mlp(0), group);
        auto [x, y] = batch_of(r);
        {
          auto guard = ddp.no_sync();
          sync_inside[size_t(r)] = ddp.require_backward_grad_sync();
          nn::functional::cross_entropy(ddp(x), y).backward();
        }
        sync_after[size_t(r)] = ddp.require_backward_grad_sync();
        nn::functional::cross_entropy(ddp(x), y).backward();
        return grads_of(ddp.module());
      });
  REQUIRE(sync_inside == std::vector<int>{0, 0});
  REQUIRE(sync_after == std::vector<int>{1, 1});
  // Each rank accumulated twice its own gradient; the average of those is twice the average.
  auto want = expected_average(2);
  for (auto& g : want)
    for (double& v : g)
      v *= 2;
  for (const auto& g : got)
    require_close(g, want);
}

namespace {

// Two heads; `use_b` decides whether head b takes part, and `c` is never used.
class two_heads : public nn::module {
public:
  explicit two_heads(uint64_t seed) {
    generator g(seed);
    a_ = register_module("a", std::make_shared<nn::linear>(6, 3, true, &g));
    b_ = register_module("b", std::make_shared<nn::linear>(6, 3, true, &g));
    c_ = register_module("c", std::make_shared<nn::linear>(6, 3, true, &g));
  }
  tensor forward(const tensor& x) override { return use_b ? (*a_)(x).add((*b_)(x)) : (*a_)(x); }
  bool use_b = true;

private:
  std::shared_ptr<nn::linear> a_, b_, c_;
};

} // namespace

TEST_CASE("DDP: unused parameters are an error naming them, or count as ready with "
          "find_unused_parameters") {
  // Without the option: backward fails on every rank, naming c (and b where unused).
  const auto errors = on_ranks<std::string>(2, [](int, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    distributed_data_parallel ddp(std::make_shared<two_heads>(0), group);
    auto [x, y] = batch_of(0);
    return error_of([&] { nn::functional::cross_entropy(ddp(x), y).backward(); });
  });
  for (const auto& e : errors) {
    REQUIRE(e.find("'c.weight', 'c.bias'") != std::string::npos);
    REQUIRE(e.find("find_unused_parameters") != std::string::npos);
  }

  // With it: rank 1 does not use b; nobody uses c. No hang; b gets the average over ranks of
  // (rank 0's gradient, 0); c's gradient stays undefined, as in torch.
  struct result {
    std::vector<double> a_w, b_w;
    bool c_defined;
  };
  const auto got = on_ranks<result>(2, [](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    auto m = std::make_shared<two_heads>(0);
    m->use_b = r == 0;
    distributed_data_parallel ddp(m, group, {.find_unused_parameters = true});
    for (int it = 0; it < 2; ++it) { // the second iteration runs on rebuilt buckets
      ddp.module().zero_grad();
      auto [x, y] = batch_of(r);
      nn::functional::cross_entropy(ddp(x), y).backward();
    }
    const auto params = m->named_parameters();
    return result{values_of(params[0].second.grad()), values_of(params[2].second.grad()),
                  params[4].second.grad().defined()};
  });
  // The expected values, without DDP.
  std::vector<double> a_sum, b0;
  for (int r = 0; r < 2; ++r) {
    auto m = std::make_shared<two_heads>(0);
    m->use_b = r == 0;
    auto [x, y] = batch_of(r);
    nn::functional::cross_entropy((*m)(x), y).backward();
    const auto params = m->named_parameters();
    const auto a = values_of(params[0].second.grad());
    a_sum.resize(a.size(), 0.0);
    for (size_t k = 0; k < a.size(); ++k)
      a_sum[k] += a[k] / 2;
    if (r == 0)
      b0 = values_of(params[2].second.grad());
  }
  for (const result& g : got) {
    require_close({g.a_w}, {a_sum});
    std::vector<double> half(b0.size());
    for (size_t k = 0; k < b0.size(); ++k)
      half[k] = b0[k] / 2;
    require_close({g.b_w}, {half});
    REQUIRE_FALSE(g.c_defined);
  }
}

TEST_CASE("DDP: parameters that differ across ranks are an error on every rank naming them") {
  const auto errors = on_ranks<std::string>(2, [](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    return error_of([&] { distributed_data_parallel ddp(mlp(0, 6, r == 0 ? 5 : 7), group); });
  });
  for (const auto& e : errors) {
    REQUIRE(e.find("'0.weight' has shape [5, 6] (float32) on rank 0 but [7, 6] (float32) on "
                   "rank 1") != std::string::npos);
    REQUIRE(e.find("'2.weight'") != std::string::npos);
  }
}

TEST_CASE("SyncBatchNorm over 2 ranks matches BatchNorm over the union of their batches") {
  auto model = [] {
    generator g(5);
    return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
        std::make_shared<nn::linear>(6, 5, true, &g), std::make_shared<nn::batch_norm1d>(5),
        std::make_shared<nn::relu>(), std::make_shared<nn::linear>(5, 3, true, &g)});
  };
  struct result {
    std::vector<double> out;
    std::vector<std::vector<double>> grads;
    std::vector<double> running_mean, running_var;
    std::string bn_name;
    int converted = 0;
  };
  const auto got = on_ranks<result>(2, [&](int r, process_group_gloo& pg) {
    auto group = replicas_of(pg);
    auto m = model();
    result res;
    res.converted = convert_sync_batchnorm(*m, group);
    distributed_data_parallel ddp(m, group);
    for (int it = 0; it < 2; ++it) { // twice: the running statistics accumulate
      ddp.module().zero_grad();
      auto [x, y] = batch_of(r);
      const tensor out = ddp(x);
      nn::functional::cross_entropy(out, y).backward();
      res.out = values_of(out);
    }
    res.grads = grads_of(*m);
    const auto& bn = dynamic_cast<const nn::batch_norm1d&>(*(*m)[1]);
    res.running_mean = values_of(bn.running_mean);
    res.running_var = values_of(bn.running_var);
    res.bn_name = bn.name();
    return res;
  });
  // One process, plain BatchNorm, the two batches concatenated.
  auto ref = model();
  std::vector<double> ref_out;
  for (int it = 0; it < 2; ++it) {
    ref->zero_grad();
    auto [x0, y0] = batch_of(0);
    auto [x1, y1] = batch_of(1);
    const tensor out = (*ref)(cat({x0, x1}, 0));
    nn::functional::cross_entropy(out, cat({y0, y1}, 0)).backward();
    ref_out = values_of(out);
  }
  const auto& ref_bn = dynamic_cast<const nn::batch_norm1d&>(*(*ref)[1]);
  for (int r = 0; r < 2; ++r) {
    const result& g = got[size_t(r)];
    REQUIRE(g.converted == 1);
    REQUIRE(g.bn_name == "SyncBatchNorm");
    // This rank's rows of the union's output (4 samples x 3 classes each).
    require_close({g.out},
                  {std::vector<double>(ref_out.begin() + r * 12, ref_out.begin() + (r + 1) * 12)},
                  1e-5);
    require_close(g.grads, grads_of(*ref), 1e-5);
    require_close({g.running_mean}, {values_of(ref_bn.running_mean)}, 1e-6);
    require_close({g.running_var}, {values_of(ref_bn.running_var)}, 1e-6);
  }
}

namespace {
// Rank r's (4, 3, 2, 2) image batch, and the weight its loss sums the output with.
std::pair<tensor, tensor> images_of(int r) {
  generator g(300 + uint64_t(r));
  return {randn({4, 3, 2, 2}, {.dtype = dtype::float64}, &g).mul(1.5).add(r),
          rand({4, 3, 2, 2}, {.dtype = dtype::float64}, &g)};
}
} // namespace

TEST_CASE("SyncBatchNorm over 2 ranks matches BatchNorm2d over the union of their image batches") {
  struct result {
    std::vector<double> out, x_grad, w_grad, b_grad, running_var;
  };
  const auto got = on_ranks<result>(2, [&](int r, process_group_gloo& pg) {
    nn::sync_batch_norm sbn(3, 1e-5, 0.1, true, true, replicas_of(pg));
    sbn.to(dtype::float64);
    auto [x, w] = images_of(r);
    x.requires_grad_();
    const tensor out = sbn(x);
    (out * w).sum().backward();
    return result{values_of(out), values_of(x.grad()), values_of(sbn.weight.grad()),
                  values_of(sbn.bias.grad()), values_of(sbn.running_var)};
  });
  nn::batch_norm2d ref(3);
  ref.to(dtype::float64);
  auto [x0, w0] = images_of(0);
  auto [x1, w1] = images_of(1);
  const tensor x = cat({x0, x1}, 0).requires_grad_();
  const tensor out = ref(x);
  (out * cat({w0, w1}, 0)).sum().backward();
  const auto ref_out = values_of(out), ref_xg = values_of(x.grad());
  std::vector<double> w_sum(3, 0), b_sum(3, 0);
  for (int r = 0; r < 2; ++r) {
    const result& g = got[size_t(r)];
    const auto rows = [&](const std::vector<double>& v) {
      return std::vector<double>(v.begin() + r * 48, v.begin() + (r + 1) * 48);
    };
    require_close({g.out}, {rows(ref_out)}, 1e-9);
    require_close({g.x_grad}, {rows(ref_xg)}, 1e-9);
    require_close({g.running_var}, {values_of(ref.running_var)}, 1e-9);
    for (size_t c = 0; c < 3; ++c) {
      w_sum[c] += g.w_grad[c];
      b_sum[c] += g.b_grad[c];
    }
  }
  // Each rank's weight and bias gradients are its own batch's share (DDP averages them).
  require_close({w_sum, b_sum}, {values_of(ref.weight.grad()), values_of(ref.bias.grad())}, 1e-9);
}

TEST_CASE("SyncBatchNorm without a group uses the default group's world, built or converted") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  CHECK_NOTHROW(spawn(
      [&](int rank) {
        init_process_group({.init_method = url + "?rank=" + std::to_string(rank) + "&world_size=2",
                            .timeout = std::chrono::milliseconds(20000)});
        nn::sync_batch_norm sbn(3);
        sbn.to(dtype::float64);
        const tensor out = sbn(images_of(rank).first);
        nn::batch_norm2d ref(3);
        ref.to(dtype::float64);
        const tensor want =
            ref(cat({images_of(0).first, images_of(1).first}, 0)).narrow(0, rank * 4, 4);
        ACTORCH_CHECK(close(values_of(out), values_of(want), 1e-9), "rank ", rank,
                      ": SyncBatchNorm differs from BatchNorm2d over the union");
        nn::sequential m{std::make_shared<nn::batch_norm3d>(2)};
        ACTORCH_CHECK(convert_sync_batchnorm(m) == 1 && m[0]->name() == "SyncBatchNorm", "rank ",
                      rank, ": BatchNorm3d not converted");
        destroy_process_group();
      },
      2));
  nn::sync_batch_norm lone(3);
  REQUIRE_THROWS_WITH(lone(ones({4, 3})),
                      Contains("SyncBatchNorm: no process_group was given and the default group "
                               "is not initialised"));
  nn::batch_norm1d bn(3);
  REQUIRE_THROWS_WITH(convert_sync_batchnorm(bn), Contains("convert_sync_batchnorm: no "
                                                           "process_group was given"));
}

TEST_CASE("DDP's state_dict carries torch's module. prefix and loading takes keys with or "
          "without it") {
  const auto got = on_ranks<int>(1, [](int, process_group_gloo& pg) {
    auto m = mlp(1);
    distributed_data_parallel ddp(m, replicas_of(pg));
    const nn::named_tensors sd = ddp.state_dict();
    REQUIRE(sd.size() == 4);
    CHECK(sd[0].first == "module.0.weight");
    CHECK(sd[3].first == "module.2.bias");
    // Another model's values, as DDP's and as the bare model's state dict.
    auto other = mlp(2);
    distributed_data_parallel other_ddp(other, replicas_of(pg));
    ddp.load_state_dict(other_ddp.state_dict());
    CHECK(values_of(m->state_dict()[0].second) == values_of(other->state_dict()[0].second));
    ddp.load_state_dict(mlp(3)->state_dict());
    CHECK(values_of(m->state_dict()[0].second) == values_of(mlp(3)->state_dict()[0].second));
    // strict: an unknown key is still an error, named with what is left after the prefix.
    nn::named_tensors extra = other_ddp.state_dict();
    extra.emplace_back("module.extra", zeros({1}));
    REQUIRE_THROWS_WITH(ddp.load_state_dict(extra), Contains("unexpected key \"extra\""));
    return 1;
  });
  CHECK(got.size() == 1);
}

TEST_CASE("adaptive buckets: the boundaries end the last all-reduce earliest under the model") {
  const size_t mib = 1 << 20;
  const std::vector<size_t> bytes(4, mib);
  const std::vector<double> ready{0, 1e-3, 2e-3, 3e-3};
  const std::vector<int> one_kind(4, 0);
  const double per_byte = 1e-3 / double(mib); // 1 ms per MiB
  // Cheap collectives: one bucket per gradient, each exchanged while the next is computed.
  auto b = choose_bucket_boundaries(ready, bytes, one_kind, 100 * mib, 1e-5, per_byte);
  REQUIRE(b == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(predicted_bucket_end(ready, bytes, b, 1e-5, per_byte) == Approx(4.01e-3 + 3e-5));
  // Costly collectives: one bucket.
  b = choose_bucket_boundaries(ready, bytes, one_kind, 100 * mib, 10e-3, per_byte);
  REQUIRE(b == std::vector<int64_t>{0, 0, 0, 0});
  // The cap splits it; a lone gradient above the cap still gets a bucket.
  b = choose_bucket_boundaries(ready, bytes, one_kind, 2 * mib, 10e-3, per_byte);
  REQUIRE(b == std::vector<int64_t>{0, 0, 1, 1});
  b = choose_bucket_boundaries(ready, bytes, one_kind, mib / 2, 10e-3, per_byte);
  REQUIRE(b == std::vector<int64_t>{0, 1, 2, 3});
  // A bucket holds one dtype.
  b = choose_bucket_boundaries(ready, bytes, {0, 0, 1, 1}, 100 * mib, 10e-3, per_byte);
  REQUIRE(b == std::vector<int64_t>{0, 0, 1, 1});
  REQUIRE(error_of([&] {
            choose_bucket_boundaries(ready, bytes, {0}, mib, 0, per_byte);
          }).find("differ in length") != std::string::npos);
}

TEST_CASE("adaptive buckets settle on the same buckets on every rank, and the gradients stay "
          "the average") {
  struct seen {
    bool adapted_early = true, adapted = false;
    std::vector<std::vector<size_t>> buckets;
    std::vector<std::vector<double>> grads;
  };
  for (const bool adaptive : {true, false}) {
    const auto want = expected_average(2);
    const auto got = on_ranks<seen>(2, [&](int r, process_group_gloo& pg) {
      distributed_data_parallel ddp(mlp(0), replicas_of(pg),
                                    {.bucket_cap_mb = 1e-4, .adaptive_buckets = adaptive});
      auto [x, y] = batch_of(r);
      seen s;
      for (int it = 0; it < 12; ++it) {
        ddp.module().zero_grad();
        nn::functional::cross_entropy(ddp(x), y).backward();
        if (it == 2)
          s.adapted_early = ddp.reducer().buckets_adapted();
      }
      s.adapted = ddp.reducer().buckets_adapted();
      s.buckets = ddp.reducer().buckets();
      s.grads = grads_of(ddp.module());
      return s;
    });
    REQUIRE_FALSE(got[0].adapted_early);
    REQUIRE(got[0].adapted == adaptive);
    REQUIRE(got[1].adapted == adaptive);
    REQUIRE(got[0].buckets == got[1].buckets);
    for (const seen& s : got)
      require_close(s.grads, want);
  }
}

TEST_CASE("gradient_as_bucket_view: gradients are views into the buckets and accumulate there, "
          "and backward writes them there after zero_grad") {
  const auto want = expected_average(2);
  struct seen {
    bool views = false;
    std::vector<std::vector<double>> once, twice, afresh;
    int written_in_bucket = 0; // gradients found in the bucket as backward made them
    int params = 0;
    bool cleared = false; // no destination left once DDP is gone
  };
  const auto got = on_ranks<seen>(2, [](int r, process_group_gloo& pg) {
    std::vector<tensor> kept;
    seen s;
    {
      distributed_data_parallel ddp(mlp(0), replicas_of(pg), {.gradient_as_bucket_view = true});
      auto [x, y] = batch_of(r);
      nn::functional::cross_entropy(ddp(x), y).backward();
      s.once = grads_of(ddp.module());
      // One bucket (the default cap): every gradient lies in one storage.
      const auto params = ddp.module().parameters();
      s.views = ddp.reducer().buckets().size() == 1;
      for (const tensor& p : params)
        s.views = s.views && p.grad().storage().get() == params[0].grad().storage().get();
      // No zero_grad: the second backward accumulates into the views, which DDP then averages.
      nn::functional::cross_entropy(ddp(x), y).backward();
      s.twice = grads_of(ddp.module());
      // Set to None, each gradient is made in its bucket slot (Note [Gradient destinations]):
      // the hooks see it there before DDP's copy-in would have run.
      const storage* bucket = params[0].grad().storage().get();
      for (tensor p : params)
        p.register_post_accumulate_grad_hook([&s, bucket](const tensor& leaf) {
          s.written_in_bucket += leaf.grad().storage().get() == bucket ? 1 : 0;
        });
      zero_grads(params);
      nn::functional::cross_entropy(ddp(x), y).backward();
      s.afresh = grads_of(ddp.module());
      s.params = int(params.size());
      kept = params;
    }
    s.cleared = std::none_of(kept.begin(), kept.end(), [](const tensor& p) {
      return autograd::grad_destination(p).defined();
    });
    return s;
  });
  auto doubled = want;
  for (auto& g : doubled)
    for (double& v : g)
      v *= 2;
  for (const seen& s : got) {
    REQUIRE(s.views);
    require_close(s.once, want);
    require_close(s.twice, doubled);
    require_close(s.afresh, want);
    CHECK(s.written_in_bucket == s.params);
    CHECK(s.cleared);
  }
}

namespace {

// Runs fn(i) on one thread per local replica i and waits; each replica's exception, if any.
std::vector<std::exception_ptr> on_replicas(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  return errors;
}

// A process exchange for local_replicas tests: `processes` processes whose others all hold
// the same local sum as this one (so the cross-process sum is that sum times `processes`).
class mirror_exchange final : public process_exchange {
public:
  explicit mirror_exchange(int processes, device on = kCPU) : processes_(processes), on_(on) {}
  int process_rank() const override { return 0; }
  int num_processes() const override { return processes_; }
  device collective_device() const override { return on_; }
  void submit(uint64_t, tensor sum, reduce_op op,
              std::function<void(std::exception_ptr)> done) override {
    if (op == reduce_op::sum)
      sum.mul_(processes_);
    done(nullptr);
  }

private:
  int processes_;
  device on_;
};

} // namespace

TEST_CASE("local replicas reduce in place into every replica's own tensor, in index order") {
  for (const int processes : {1, 2}) {
    local_replicas locals(3, std::make_shared<mirror_exchange>(processes));
    const int world = 3 * processes;
    // Float sums whose value depends on the order: 1e8 + 1 - 1e8 is 0 in float32 when added
    // left to right (the 1 is lost), 1 in another order.
    const std::vector<float> part_value{1e8f, 1.0f, -1e8f};
    std::vector<tensor> parts;
    for (float v : part_value)
      parts.push_back(full({1000}, double(v)));
    std::vector<tensor> maxes{full({2}, 1.0), full({2}, 5.0), full({2}, 3.0)};
    std::vector<work> sums(3), max_works(3);
    for (const auto& e : on_replicas(3, [&](int i) {
           auto g = locals.replica(i);
           sums[size_t(i)] = g->all_reduce(parts[size_t(i)], reduce_op::sum);
           sums[size_t(i)].wait();
           max_works[size_t(i)] = g->all_reduce(maxes[size_t(i)], reduce_op::max);
           max_works[size_t(i)].wait();
         }))
      REQUIRE(e == nullptr);
    const float in_order = (1e8f + 1.0f) + -1e8f; // 0
    for (int i = 0; i < 3; ++i) {
      REQUIRE(sums[size_t(i)].result().at(0).data_ptr() == parts[size_t(i)].data_ptr());
      REQUIRE(values_of(parts[size_t(i)]) ==
              std::vector<double>(1000, double(in_order * float(processes))));
      REQUIRE(values_of(maxes[size_t(i)]) == std::vector<double>{5.0, 5.0});
    }
    // AVG divides by every replica of every process.
    std::vector<tensor> xs{full({4}, 1.0), full({4}, 2.0), full({4}, 6.0)};
    for (const auto& e : on_replicas(3, [&](int i) {
           locals.replica(i)->all_reduce(xs[size_t(i)], reduce_op::avg).wait();
         }))
      REQUIRE(e == nullptr);
    for (int i = 0; i < 3; ++i)
      REQUIRE(values_of(xs[size_t(i)]) == std::vector<double>(4, 9.0 * processes / world));
  }
  local_replicas pair(2, std::make_shared<mirror_exchange>(1));
  std::vector<tensor> odd{zeros({4}), zeros({5})};
  std::vector<std::string> messages(2);
  on_replicas(2, [&](int i) {
    messages[size_t(i)] =
        error_of([&] { pair.replica(i)->all_reduce(odd[size_t(i)], reduce_op::sum).wait(); });
  });
  for (const std::string& m : messages)
    REQUIRE_THAT(m, Contains("collective 0 does not match") && Contains("[4]") && Contains("[5]"));
}

TEST_CASE("all_reduce_coalesced reduces each tensor in place: where it lies within a process, "
          "through one flat buffer across processes") {
  for (const int processes : {1, 2}) {
    local_replicas locals(2, std::make_shared<mirror_exchange>(processes));
    REQUIRE(locals.replica(0)->reduces_in_place() == (processes == 1));
    std::vector<std::vector<tensor>> ts(2);
    for (int i = 0; i < 2; ++i)
      ts[size_t(i)] = {full({3}, double(i + 1)), full({2, 2}, double(10 * (i + 1)))};
    for (const auto& e : on_replicas(2, [&](int i) {
           locals.replica(i)->all_reduce_coalesced(ts[size_t(i)], reduce_op::avg).wait();
         }))
      REQUIRE(e == nullptr);
    for (int i = 0; i < 2; ++i) {
      REQUIRE(values_of(ts[size_t(i)][0]) == std::vector<double>(3, 1.5));
      REQUIRE(values_of(ts[size_t(i)][1]) == std::vector<double>(4, 15.0));
    }
  }
}

TEST_CASE("local replicas take one device each, replica 0's that of the process exchange",
          "[cuda_host]") {
  local_replicas gpus(2, std::make_shared<mirror_exchange>(1), {kGPU, device("cuda:1")});
  CHECK(gpus.replica(0)->collective_device() == kGPU);
  CHECK(gpus.replica(1)->collective_device() == device("cuda:1"));
  CHECK(local_replicas(2, std::make_shared<mirror_exchange>(2)).replica(1)->collective_device() ==
        kCPU);
  CHECK_THAT(error_of([] { local_replicas(2, std::make_shared<mirror_exchange>(1), {kGPU}); }),
             Contains("local_replicas: 2 replicas but 1 devices"));
  CHECK_THAT(
      error_of([] {
        local_replicas(2, std::make_shared<mirror_exchange>(2), {kGPU, kGPU});
      }),
      Contains("replica 0 is on cuda:0 but the process group's collectives take tensors on cpu"));
}

TEST_CASE("local replicas on GPUs reduce as on the CPU, within a process and across processes",
          "[cuda]") {
  SKIP_WITHOUT_GPU();
  // Two replicas on cuda:0 and cuda:1, or both on cuda:0 where it is the only GPU (Note
  // [Replicas on GPUs]); each replica's tensor is written on its own thread's stream just
  // before it arrives, so a reduction that did not wait for it would read the old values.
  const device second(device_type::cuda, 1 % cuda::device_count());
  for (const int processes : {1, 2}) {
    local_replicas locals(2, std::make_shared<mirror_exchange>(processes, kGPU), {kGPU, second});
    const int world = 2 * processes;
    std::vector<tensor> xs{zeros({1 << 20}, {.device = kGPU}),
                           zeros({1 << 20}, {.device = second})};
    std::vector<std::vector<tensor>> cs(2);
    for (const auto& e : on_replicas(2, [&](int i) {
           const device d = i == 0 ? kGPU : second;
           cuda::set_device(d.index);
           auto g = locals.replica(i);
           xs[size_t(i)].fill_(double(i + 1));
           g->all_reduce(xs[size_t(i)], reduce_op::avg).wait();
           cs[size_t(i)] = {full({3}, double(i + 1), {.device = d}),
                            full({2, 2}, double(10 * (i + 1)), {.device = d})};
           g->all_reduce_coalesced(cs[size_t(i)], reduce_op::max).wait();
         }))
      REQUIRE(e == nullptr);
    for (int i = 0; i < 2; ++i) {
      CHECK(values_of(xs[size_t(i)]) == std::vector<double>(1 << 20, 3.0 * processes / world));
      CHECK(values_of(cs[size_t(i)][0]) == std::vector<double>(3, 2.0));
      CHECK(values_of(cs[size_t(i)][1]) == std::vector<double>(4, 20.0));
    }
  }
}

TEST_CASE("ZeroRedundancyOptimizer between trainer threads of one process gives the plain step") {
  // Two replicas sharing memory (local_replicas, as trainer actors use it): each owns half the
  // optimizer state, and the parameters come out as with a plain SGD, bit for bit.
  std::vector<std::vector<std::vector<double>>> got[2];
  for (const bool sharded : {false, true}) {
    local_replicas locals(2, std::make_shared<mirror_exchange>(1));
    got[sharded].resize(2);
    for (const auto& e : on_replicas(2, [&](int i) {
           distributed_data_parallel ddp(mlp(0), locals.replica(i));
           std::unique_ptr<zero_redundancy_optimizer> zero;
           std::unique_ptr<optim::optimizer> plain;
           auto make = [](std::vector<tensor> ps) -> std::unique_ptr<optim::optimizer> {
             return std::make_unique<optim::sgd>(std::move(ps),
                                                 optim::sgd_options{.lr = 0.1, .momentum = 0.9});
           };
           if (sharded)
             zero = std::make_unique<zero_redundancy_optimizer>(ddp.module().parameters(), make,
                                                                ddp.group_ptr());
           else
             plain = make(ddp.module().parameters());
           for (int step = 0; step < 3; ++step) {
             auto [x, y] = batch_of(i + 2 * step);
             nn::functional::cross_entropy(ddp(x), y).backward();
             zero ? zero->step() : plain->step();
             zero ? zero->zero_grad() : plain->zero_grad();
           }
           for (const tensor& p : ddp.module().parameters())
             got[sharded][size_t(i)].push_back(values_of(p));
         }))
      REQUIRE(e == nullptr);
  }
  REQUIRE(got[1][0] == got[0][0]);
  REQUIRE(got[1][1] == got[0][0]);
}

TEST_CASE("a DDP bucket that waits for a missing rank is named in the roll call") {
  // Rank 1 stops after two steps: rank 0's next backward waits in bucket 0's all-reduce and
  // its error at the timeout names that collective by its caller's tag.
  auto opts = short_timeout(2500); // the ledger publishes every second: two beats at least
  const auto errors = on_ranks<std::string>(
      2,
      [](int r, process_group_gloo& pg) {
        distributed_data_parallel ddp(mlp(0), replicas_of(pg), {.adaptive_buckets = false});
        auto [x, y] = batch_of(r);
        for (int step = 0; step < 2; ++step) // the second rebuilds the buckets
          nn::functional::cross_entropy(ddp(x), y).backward();
        if (r == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(3500));
          return std::string();
        }
        return error_of([&] { nn::functional::cross_entropy(ddp(x), y).backward(); });
      },
      opts);
  CHECK_THAT(errors[0], Contains("Roll call: ") && Contains("rank 1 last finished all_reduce #") &&
                            Contains("rank 0 is in all_reduce #") &&
                            Contains(" (DDP bucket 0) (for "));
}
