// The loader's device option: batches copied to a GPU one ahead of the consumer (Note [Device
// prefetch]). Tagged [cuda] where a GPU is needed; those pass at once, saying why, without one.
#include <catch2/catch.hpp>

#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/ops/factory.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/gpu.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("a loader given a GPU that does not exist fails naming it",
          "[actors][loader][cuda_host]") {
  if (cuda::device_count() > 7) {
    WARN("this machine has a cuda:7");
    return;
  }
  auto ds = std::make_shared<probe_dataset>(8);
  CHECK_THROWS_WITH(data::data_loader(ds, {.batch_size = 4, .device = device("cuda:7")}),
                    Contains("DataLoader: device cuda:7 does not exist"));
  CHECK_THROWS_WITH(data::data_loader(ds, {.batch_size = 4, .device = kCPU}),
                    Contains("DataLoader: device must be a CUDA device but got cpu"));
}

TEST_CASE("a loader with a device delivers every batch on it, in order, as on the CPU",
          "[actors][loader][cuda]") {
  SKIP_WITHOUT_GPU();
  auto ds = std::make_shared<probe_dataset>(37);
  for (int64_t workers : {0, 2}) {
    data::data_loader on_cpu(ds, {.batch_size = 4, .num_workers = workers});
    data::data_loader on_gpu(
        ds, {.batch_size = 4, .num_workers = workers, .pin_memory = true, .device = kGPU});
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::vector<double>> want, got;
      for (const data::sample& b : on_cpu)
        want.push_back(values_of(b[0].as_tensor()));
      for (const data::sample& b : on_gpu) {
        REQUIRE(b[0].as_tensor().device() == kGPU);
        REQUIRE(b[1].as_tensor().device() == kGPU);
        // Work on the consumer's stream while the next batch's copy is in flight.
        got.push_back(values_of(b[0].as_tensor().mul(1)));
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("a loader with a device copies no batch over one the consumer's stream still reads",
          "[actors][loader][cuda]") {
  SKIP_WITHOUT_GPU();
  // Note [Device prefetch]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // The consumer's stream reads each batch only after GEMMs queued
  // ahead of it, long after the host let the batch go and the loader copied the next ones
  // into memory from the same pool (record_stream holds the batch's memory back).
  auto ds = std::make_shared<probe_dataset>(37);
  data::data_loader on_cpu(ds, {.batch_size = 4});
  data::data_loader on_gpu(ds, {.batch_size = 4, .pin_memory = true, .device = kGPU});
  std::vector<std::vector<double>> want, got;
  for (const data::sample& b : on_cpu)
    want.push_back(values_of(b[0].as_tensor()));
  const tensor a = randn({2048, 2048}, {.device = kGPU});
  std::vector<tensor> read;
  for (const data::sample& b : on_gpu) {
    for (int k = 0; k < 8; ++k)
      (void)a.mm(a);
    read.push_back(b[0].as_tensor().mul(1));
  }
  for (const tensor& t : read)
    got.push_back(values_of(t));
  CHECK(got == want);
}

TEST_CASE("a loader with a device raises a failed batch after the batches before it",
          "[actors][loader][cuda]") {
  SKIP_WITHOUT_GPU();
  auto ds = std::make_shared<probe_dataset>(16);
  ds->hook = [](int64_t i) {
    if (i == 9)
      throw std::runtime_error("bad sample 9");
  };
  data::data_loader loader(ds, {.batch_size = 4, .pin_memory = true, .device = kGPU});
  const epoch_failure f = run_until_error(loader);
  CHECK(f.batches == 2);
  CHECK_THAT(f.message, Contains("bad sample 9"));
}
