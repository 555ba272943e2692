// DDP's communication hooks at world 2 over Gloo: each built-in hook's gradients against a
// reference computed here from both ranks' own gradients (found without DDP), PowerSGD over
// iterations (vanilla first, then compressed, then with its error feedback and warm start),
// and the hook's contract (once, before the first backward; a result of the bucket's size).
#include <catch2/catch.hpp>

#include "comm/ddp/comm_hooks.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

constexpr int kWorld = 2;

// Linear(8, 6) ReLU Linear(6, 4): both weights pay for rank-1 compression, the biases do not.
std::shared_ptr<nn::sequential> model() {
  generator g(7);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(8, 6, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(6, 4, true, &g)});
}

tensor loss_of(const std::function<tensor(const tensor&)>& forward, int r) {
  generator g(300 + uint64_t(r));
  const tensor x = randn({5, 8}, {}, &g), y = randint(0, 4, {5}, {}, &g);
  return nn::functional::cross_entropy(forward(x), y);
}

// Rank r's own gradients, in parameter order (no DDP).
std::vector<tensor> local_grads(int r) {
  auto m = model();
  loss_of([&](const tensor& x) { return (*m)(x); }, r).backward();
  std::vector<tensor> out;
  for (const tensor& p : m->parameters())
    out.push_back(p.grad().clone());
  return out;
}

struct ddp_run {
  std::vector<std::vector<tensor>> grads; // per iteration, in parameter order
  size_t buckets = 0;
  std::vector<size_t> bucket_order; // the last iteration's first bucket
  std::vector<int64_t> bytes;       // PowerSGD: bytes reduced after each iteration
};

// Each rank's gradients after `iterations` DDP backward passes under the hook (gradients set to
// None before each, the parameters unchanged, so every iteration sees the same local grads).
std::vector<ddp_run> run_ddp(int iterations, const std::function<comm_hook()>& make_hook,
                             std::shared_ptr<hooks::powersgd_state>* powersgd = nullptr) {
  return on_ranks<ddp_run>(kWorld, [&](int r, process_group_gloo& pg) {
    std::shared_ptr<hooks::powersgd_state> state;
    distributed_data_parallel ddp(model(), replicas_of(pg), {.adaptive_buckets = false});
    if (powersgd) {
      state = std::make_shared<hooks::powersgd_state>((*powersgd)->opts);
      ddp.register_comm_hook(hooks::powersgd_hook(state));
    } else if (make_hook) {
      ddp.register_comm_hook(make_hook());
    }
    ddp_run out;
    for (int it = 0; it < iterations; ++it) {
      for (tensor& p : ddp.module().parameters())
        p.set_grad(tensor());
      loss_of([&](const tensor& x) { return ddp(x); }, r).backward();
      out.grads.emplace_back();
      for (const tensor& p : ddp.module().parameters())
        out.grads.back().push_back(p.grad().clone());
      if (state)
        out.bytes.push_back(state->bytes_reduced);
    }
    out.buckets = ddp.reducer().buckets().size(); // checked on the main thread (Catch)
    out.bucket_order = ddp.reducer().buckets()[0];
    return out;
  });
}

void require_close(const tensor& got, const tensor& want, double tol) {
  const auto g = values_of(got), w = values_of(want);
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= tol);
  }
}

} // namespace

TEST_CASE("allreduce, fp16 and bf16 hooks give the reference average of both ranks") {
  const auto g0 = local_grads(0), g1 = local_grads(1);
  SECTION("no hook and allreduce_hook: the mean") {
    for (bool hooked : {false, true}) {
      const auto runs = run_ddp(1, hooked ? std::function<comm_hook()>(hooks::allreduce_hook)
                                          : std::function<comm_hook()>());
      for (const auto& run : runs)
        for (size_t i = 0; i < g0.size(); ++i)
          require_close(run.grads[0][i], g0[i].add(g1[i]).div(2.0), 1e-7);
    }
  }
  SECTION("fp16 and bf16: each rank's gradient rounded, halved and summed in that dtype") {
    for (dtype as : {dtype::float16, dtype::bfloat16}) {
      INFO(dtype_name(as));
      const auto runs =
          run_ddp(1, as == dtype::float16 ? hooks::fp16_compress_hook : hooks::bf16_compress_hook);
      for (const auto& run : runs)
        for (size_t i = 0; i < g0.size(); ++i) {
          const tensor want = g0[i].to(as).div(2.0).add(g1[i].to(as).div(2.0)).to_float();
          require_close(run.grads[0][i], want, 0);
        }
    }
  }
}

TEST_CASE("PowerSGD: vanilla until start_powersgd_iter, then rank-1 P Q^T with error feedback "
          "and warm start, as computed here") {
  hooks::powersgd_options o;
  o.matrix_approximation_rank = 1;
  o.start_powersgd_iter = 2;
  o.random_seed = 5;
  auto proto = std::make_shared<hooks::powersgd_state>(o);
  const auto runs = run_ddp(4, {}, &proto);
  const std::vector<tensor> g[2] = {local_grads(0), local_grads(1)};
  REQUIRE(runs[0].buckets == 1);
  const auto& order = runs[0].bucket_order;
  REQUIRE(runs[1].bucket_order == order);

  // Iterations 0 and 1: the plain average.
  for (const auto& run : runs)
    for (int it = 0; it < 2; ++it)
      for (size_t i = 0; i < g[0].size(); ++i)
        require_close(run.grads[size_t(it)][i], g[0][i].add(g[1][i]).div(2.0), 1e-7);

  // Iterations 2 and 3, worked out from both ranks' inputs: the weights (dim 2) compressed, in
  // bucket order, their first Qs drawn from the seeded generator; the biases averaged.
  generator rng(o.random_seed);
  std::map<size_t, tensor> q; // parameter -> its Q, carried to the next iteration
  for (size_t i : order)
    if (g[0][i].dim() == 2) {
      q[i] = randn({g[0][i].size(1), 1}, {}, &rng);
    }
  std::vector<tensor> input[2] = {g[0], g[1]}; // iteration 2's inputs: no error yet
  for (int it = 2; it < 4; ++it) {
    std::vector<tensor> want(g[0].size());
    for (size_t i : order) {
      if (g[0][i].dim() != 2) {
        want[i] = input[0][i].add(input[1][i]).div(2.0);
        continue;
      }
      tensor qi = q[i].clone();
      hooks::orthogonalize(qi);
      tensor p = matmul(input[0][i], qi).add(matmul(input[1][i], qi));
      hooks::orthogonalize(p);
      q[i] = matmul(input[0][i].t(), p).add(matmul(input[1][i].t(), p)).div(2.0);
      want[i] = matmul(p, q[i].t());
    }
    for (const auto& run : runs)
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("iteration " << it << ", parameter " << i);
        require_close(run.grads[size_t(it)][i], want[i], 1e-5);
      }
    // Error feedback: what the approximation missed joins the next iteration's input.
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < want.size(); ++i)
        input[r][i] = g[r][i].add(input[r][i].sub(want[i]));
  }
  // Compressed iterations move fewer bytes: the biases, P and Q instead of the whole bucket.
  const int64_t bucket = 4 * (6 * 8 + 6 + 4 * 6 + 4);
  CHECK(runs[0].bytes[1] == 2 * bucket);
  CHECK(runs[0].bytes[2] - runs[0].bytes[1] == 4 * ((6 + 4) + (6 + 4) + (8 + 6)));
}

TEST_CASE("orthogonalize gives orthonormal columns spanning the same space") {
  generator g(2);
  tensor m = randn({7, 3}, {.dtype = dtype::float64}, &g);
  const tensor before = m.clone();
  hooks::orthogonalize(m);
  const tensor gram = matmul(m.t(), m);
  require_close(gram, eye(3, 3, {.dtype = dtype::float64}), 1e-12);
  // The first column keeps its direction.
  require_close(
      m.narrow(1, 0, 1),
      before.narrow(1, 0, 1).div(before.narrow(1, 0, 1).mul(before.narrow(1, 0, 1)).sum().sqrt()),
      1e-12);
}

TEST_CASE("a comm hook is registered once before the first backward, and its result is checked") {
  const auto errors = on_ranks<std::vector<std::string>>(kWorld, [](int r, process_group_gloo& pg) {
    std::vector<std::string> out;
    distributed_data_parallel ddp(model(), replicas_of(pg));
    ddp.register_comm_hook(hooks::allreduce_hook());
    out.push_back(error_of([&] { ddp.register_comm_hook(hooks::allreduce_hook()); }));
    distributed_data_parallel late(model(), replicas_of(pg));
    loss_of([&](const tensor& x) { return late(x); }, r).backward();
    out.push_back(error_of([&] { late.register_comm_hook(hooks::allreduce_hook()); }));
    distributed_data_parallel wrong(model(), replicas_of(pg));
    wrong.register_comm_hook(
        [](grad_bucket& b) { return work::completed({b.buffer().narrow(0, 0, 3)}); });
    out.push_back(
        error_of([&] { loss_of([&](const tensor& x) { return wrong(x); }, r).backward(); }));
    return out;
  });
  CHECK_THROWS_WITH(hooks::powersgd_state(hooks::powersgd_options{.start_powersgd_iter = 1}),
                    Contains("start_powerSGD_iter` > 1"));
  for (const auto& e : errors) {
    CHECK_THAT(e[0], Contains("register_comm_hook can only be called once"));
    CHECK_THAT(e[1], Contains("before the first forward and backward"));
    CHECK_THAT(e[2],
               Contains("the communication hook's result for bucket 0") && Contains("elements"));
  }
}
