// The NCCL group and DDP over it on one GPU (world 1), tagged [cuda]: they pass at once,
// saying why, where no GPU is present. The device checks of DDP run everywhere.
#include <catch2/catch.hpp>

#include "comm/backend/nccl/process_group_nccl.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/store/hash_store.hpp"
#include "core/core.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/gpu.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

std::shared_ptr<process_group> nccl_world1() {
  return make_process_group_nccl(std::make_shared<hash_store>(10s), 0, 1, 10000ms);
}

std::shared_ptr<nn::sequential> mlp(uint64_t seed) {
  generator g(seed);
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(6, 5, true, &g), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(5, 3, true, &g)});
}

} // namespace

TEST_CASE("DDP refuses parameters on a device its group does not communicate on",
          "[comm][ddp][cuda_host]") {
  // A parameter labelled cuda:0 over host memory and a Gloo group: refused before any copy.
  std::vector<float> memory(4, 0.0f);
  tensor p = from_blob(memory.data(), {4}, dtype::float32, {}, {}, kGPU);
  p.requires_grad_();
  auto pg = std::make_shared<process_group_gloo>(std::make_shared<hash_store>(2s), 0, 1,
                                                 short_timeout(2000));
  CHECK_THAT(error_of([&] { reducer({p}, {"w"}, process_replicas(pg)); }),
             Contains("the parameters are on cuda:0 but the process group's collectives take "
                      "tensors on cpu (CUDA parameters need the nccl backend"));
}

TEST_CASE("every NCCL collective works at world 1 on one GPU", "[comm][nccl][cuda]") {
  SKIP_WITHOUT_GPU();
  auto pg = nccl_world1();
  CHECK(pg->collective_device() == kGPU);
  tensor t = arange(6, {.dtype = dtype::float32, .device = kGPU});
  pg->all_reduce(t, reduce_op::sum).wait();
  CHECK(values_of(t) == std::vector<double>{0, 1, 2, 3, 4, 5});
  pg->all_reduce(t, reduce_op::avg).wait();
  pg->broadcast(t, 0).wait();
  pg->reduce(t, 0, reduce_op::max).wait();
  CHECK(values_of(t) == std::vector<double>{0, 1, 2, 3, 4, 5});
  tensor gathered = empty({6}, {.device = kGPU});
  pg->all_gather_into_tensor(gathered, t).wait();
  CHECK(values_of(gathered) == values_of(t));
  std::vector<tensor> outs{empty({6}, {.device = kGPU})};
  pg->all_gather(outs, t).wait();
  CHECK(values_of(outs[0]) == values_of(t));
  tensor scattered = empty({6}, {.device = kGPU});
  pg->scatter(scattered, {t}, 0).wait();
  CHECK(values_of(scattered) == values_of(t));
  tensor rs = empty({6}, {.device = kGPU});
  pg->reduce_scatter(rs, {t}, reduce_op::sum).wait();
  CHECK(values_of(rs) == values_of(t));
  std::vector<tensor> a2a{empty({6}, {.device = kGPU})};
  pg->all_to_all(a2a, {t}).wait();
  CHECK(values_of(a2a[0]) == values_of(t));
  pg->barrier().wait();
  tensor cpu = zeros({1});
  CHECK_THROWS_WITH(pg->all_reduce(cpu, reduce_op::sum), Contains("takes tensors on cuda:0"));
}

TEST_CASE("an NCCL group whose other ranks never come is an error, not a hang",
          "[comm][nccl][cuda]") {
  SKIP_WITHOUT_GPU();
  CHECK_THROWS_WITH(make_process_group_nccl(std::make_shared<hash_store>(10s), 0, 2, 300ms),
                    Contains("nccl backend: rank 0 waited 300 ms, but only 1 of the 2 ranks came"));
}

TEST_CASE("an NCCL collective reads what the caller's stream wrote before it",
          "[comm][nccl][cuda]") {
  SKIP_WITHOUT_GPU();
  // Note [NCCL stream order]
  // ~~~~~~~~~~~~~~~~~~~~~~~~
  // The writes are queued on a side stream, the all_reduce right
  // after them; without the event the group's stream could reduce the old zeros.
  auto pg = nccl_world1();
  const cuda::stream side = cuda::stream::create();
  tensor t = zeros({1 << 22}, {.device = kGPU});
  cuda::synchronize();
  work w;
  {
    cuda::stream_guard on(side);
    for (int k = 0; k < 20; ++k)
      t.add_(1);
    w = pg->all_reduce(t, reduce_op::sum);
  }
  w.wait();
  CHECK(t.sum().item<double>() == 20.0 * double(1 << 22));
}

TEST_CASE("wait() on NCCL work makes the caller's stream wait without blocking the host, "
          "barrier() blocks it",
          "[comm][nccl][cuda]") {
  SKIP_WITHOUT_GPU();
  // Note [NCCL stream order]. About 0.1 s of GEMMs queued ahead of the collective on the
  // caller's stream: the collective cannot have run when wait() returns.
  auto pg = nccl_world1();
  const tensor a = randn({4096, 4096}, {.device = kGPU});
  tensor t = zeros({1 << 20}, {.device = kGPU});
  cuda::synchronize();
  for (int k = 0; k < 40; ++k)
    (void)a.mm(a);
  t.fill_(1);
  work w = pg->all_reduce(t, reduce_op::sum);
  w.wait();
  const bool host_waited = w.is_completed();
  t.add_(1); // queued after the wait: sees the reduced t
  CHECK(t.sum().item<double>() == 2.0 * double(1 << 20));
  CHECK_FALSE(host_waited);
  w.synchronize();
  CHECK(w.is_success());
  for (int k = 0; k < 40; ++k)
    (void)a.mm(a);
  work b = pg->barrier();
  b.wait();
  CHECK(b.is_completed());
}

TEST_CASE("DDP over NCCL at world 1 gives the plain model's gradients", "[comm][ddp][cuda]") {
  SKIP_WITHOUT_GPU();
  generator g(3);
  const tensor x = randn({8, 6}, {}, &g), y = randint(0, 3, {8}, {}, &g);
  auto plain = mlp(1);
  nn::functional::cross_entropy((*plain)(x), y).backward();
  auto model = mlp(1);
  model->to(kGPU);
  distributed_data_parallel ddp(model, process_replicas(nccl_world1()));
  nn::functional::cross_entropy(ddp(x.to(kGPU)), y.to(kGPU)).backward();
  const auto want = plain->parameters(), got = ddp.module().parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    REQUIRE(got[i].grad().device() == kGPU);
    CHECK(close(values_of(got[i].grad()), values_of(want[i].grad()), 1e-5));
  }
}

namespace {
// The seeds' DDP tutorial's ToyMpModel ("DDP with model parallelism"): net1 on dev0, net2 on
// dev1, the activation moved between them in forward; wrapped in DDP without device_ids.
class toy_mp_model : public nn::module {
public:
  toy_mp_model(const device& dev0, const device& dev1) : dev0_(dev0), dev1_(dev1) {
    generator g(11);
    net1_ = register_module("net1", std::make_shared<nn::linear>(10, 10, true, &g));
    net2_ = register_module("net2", std::make_shared<nn::linear>(10, 5, true, &g));
    net1_->to(dev0);
    net2_->to(dev1);
  }
  tensor forward(const tensor& x) override {
    return (*net2_)(relu((*net1_)(x.to(dev0_))).to(dev1_));
  }

private:
  device dev0_, dev1_;
  std::shared_ptr<nn::linear> net1_, net2_;
};
} // namespace

TEST_CASE("DDP with model parallelism: a module over two devices, wrapped without device_ids",
          "[comm][ddp][cuda]") {
  SKIP_WITHOUT_GPU();
  // One GPU: the tutorial's two devices are cuda:0 twice (the activation's moves are no-ops);
  // the outputs' device (dev1) takes the labels, as in the tutorial.
  generator g(4);
  const tensor x = randn({20, 10}, {}, &g), y = randn({20, 5}, {}, &g);
  auto plain = std::make_shared<toy_mp_model>(kCPU, kCPU);
  nn::functional::mse_loss((*plain)(x), y).backward();
  auto mp = std::make_shared<toy_mp_model>(kGPU, kGPU);
  distributed_data_parallel ddp(mp, process_replicas(nccl_world1()));
  nn::functional::mse_loss(ddp(x), y.to(kGPU)).backward();
  const auto want = plain->parameters(), got = mp->parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i)
    CHECK(close(values_of(got[i].grad()), values_of(want[i].grad()), 1e-5));
}
