// Ranks that share one GPU (Note [Ranks sharing a GPU]): told so through the store, and every op
// on CUDA tensors run by their Gloo group through host copies. The GPU parts are tagged [cuda]
// (they pass at once, saying why, where no GPU is present); the device checks run everywhere.
#include <catch2/catch.hpp>

#include "comm/backend/host_staged.hpp"
#include "core/core.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/gpu.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

tensor gpu_full(const shape_t& shape, double value) {
  return full(shape, value, {.dtype = dtype::float32, .device = kGPU});
}

// Every op of the group at world 2, on CUDA tensors whose results are known; returns the ops
// whose results were wrong, or "" (Catch2 assertions stay on the main thread).
std::string every_op(int r, process_group& pg) {
  std::string wrong;
  const auto expect = [&](const char* op, const tensor& t, const std::vector<double>& want) {
    if (t.device() != kGPU || values_of(t) != want)
      wrong += std::string(op) + " ";
  };
  tensor t = gpu_full({4}, r + 1);
  pg.all_reduce(t, reduce_op::sum).wait();
  expect("all_reduce", t, {3, 3, 3, 3});
  tensor b = arange(4, {.dtype = dtype::float32, .device = kGPU}).mul(double(r + 1));
  pg.broadcast(b, 1).wait();
  expect("broadcast", b, {0, 2, 4, 6});
  tensor m = gpu_full({2}, 10 * (r + 1));
  pg.reduce(m, 1, reduce_op::sum).wait(); // the root has the sum, rank 0 keeps its own
  expect("reduce", m, r == 1 ? std::vector<double>{30, 30} : std::vector<double>{10, 10});
  std::vector<tensor> parts{gpu_full({2}, -1), gpu_full({2}, -1)};
  pg.all_gather(parts, gpu_full({2}, r)).wait();
  expect("all_gather", parts[1], {1, 1});
  tensor flat = gpu_full({4}, -1);
  pg.all_gather_into_tensor(flat, gpu_full({2}, r + 5)).wait();
  expect("all_gather_into_tensor", flat, {5, 5, 6, 6});
  std::vector<tensor> gathered;
  if (r == 1)
    gathered = {gpu_full({1}, -1), gpu_full({1}, -1)};
  pg.gather(gathered, gpu_full({1}, 7 + r), 1).wait();
  if (r == 1)
    expect("gather", gathered[0], {7});
  tensor got = gpu_full({3}, -1);
  std::vector<tensor> sent;
  if (r == 0)
    sent = {gpu_full({3}, 30), gpu_full({3}, 31)};
  pg.scatter(got, sent, 0).wait();
  expect("scatter", got, {30.0 + r, 30.0 + r, 30.0 + r});
  tensor mine = gpu_full({2}, -1);
  pg.reduce_scatter(mine, {gpu_full({2}, 1), gpu_full({2}, 2)}, reduce_op::sum).wait();
  expect("reduce_scatter", mine, {2.0 * (r + 1), 2.0 * (r + 1)});
  std::vector<tensor> to_me{gpu_full({1}, -1), gpu_full({1}, -1)};
  pg.all_to_all(to_me, {gpu_full({1}, 10 * r), gpu_full({1}, 10 * r + 1)}).wait();
  expect("all_to_all", to_me[1], {10.0 + r});
  tensor msg = gpu_full({5}, r == 0 ? 42 : -1);
  if (r == 0)
    pg.send(msg, 1, 3).wait();
  else
    pg.recv(msg, 0, 3).wait();
  expect("send/recv", msg, {42, 42, 42, 42, 42});
  // An async all-reduce over a tensor written just before: the result is there after wait().
  tensor big = gpu_full({1 << 18}, 0.5);
  work w = pg.all_reduce(big, reduce_op::sum);
  w.wait();
  if (values_of(big.sum()) != std::vector<double>{double(1 << 18)} || w.result().size() != 1 ||
      w.result()[0].data_ptr() != big.data_ptr())
    wrong += "async all_reduce ";
  pg.barrier().wait();
  return wrong;
}

} // namespace

TEST_CASE("a host-staged group refuses tensors not on its GPU and a GPU group to run on",
          "[comm][gloo]") {
  auto errors = on_ranks<std::string>(1, [](int, process_group_gloo& pg) {
    auto staged = make_host_staged_group(unowned(pg), 0);
    tensor t = zeros({2});
    std::string e = error_of([&] { staged->all_reduce(t, reduce_op::sum); });
    return e + "|" + error_of([&] { make_host_staged_group(staged, 0); });
  });
  CHECK_THAT(errors[0], Contains("all_reduce: this group's tensors are on cuda:0 (its ranks share "
                                 "a GPU, so its ops go through host memory), got one on cpu"));
  CHECK_THAT(errors[0], Contains("make_host_staged_group: the group that runs the ops must be a "
                                 "CPU group"));
}

TEST_CASE("two ranks on one GPU are told so, and every op on CUDA tensors goes through host "
          "memory with the right results",
          "[comm][gloo][cuda]") {
  SKIP_WITHOUT_GPU();
  auto st = std::make_shared<hash_store>(std::chrono::milliseconds(5000));
  auto results = on_ranks<std::string>(
      2,
      [&](int r, process_group_gloo& pg) -> std::string {
        prefix_store gpus("gpus/", st);
        if (!ranks_share_a_gpu(gpus, r, 2, 0))
          return "not told the GPU is shared";
        auto staged = make_host_staged_group(unowned(pg), 0);
        if (staged->collective_device() != kGPU)
          return "collective_device is " + staged->collective_device().str();
        return every_op(r, *staged);
      },
      short_timeout(), st);
  CHECK(results[0] == "");
  CHECK(results[1] == "");
  auto alone = std::make_shared<hash_store>(std::chrono::milliseconds(5000));
  CHECK_FALSE(ranks_share_a_gpu(*alone, 0, 1, 0));
}
