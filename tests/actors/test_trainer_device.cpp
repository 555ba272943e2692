// Trainer actors on a GPU (trainer_spec::device): the job's checks everywhere, and, tagged
// [cuda], a GPU replica training as the CPU one does (skipped, saying why, without a GPU).
#include <catch2/catch.hpp>

#include "actors/trainer.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/store/hash_store.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "tests/actors/toy_job.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/gpu.hpp"

using namespace actorch;
using namespace actorch::actors;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

// The trainer tests' toy job (2 epochs of 256 samples), batches loaded by a worker actor,
// on device `d`.
trainer_spec spec_on(const device& d) {
  trainer_spec s = test::toy_spec(16, "");
  s.loader.num_workers = 1;
  s.device = d;
  return s;
}

} // namespace

TEST_CASE("GPU trainer jobs refuse what they cannot run, naming it",
          "[actors][trainer][cuda_host]") {
  if (!cuda::is_available())
    CHECK_THAT(
        test::error_of([] { train_data_parallel(spec_on(device("cuda:0")), {.num_local = 2}); }),
        Contains("train_data_parallel: replicas on cuda:0 need that GPU: "));
  auto gloo = std::make_shared<dist::process_group_gloo>(std::make_shared<dist::hash_store>(2s), 0,
                                                         1, test::short_timeout(2000));
  CHECK_THAT(test::error_of(
                 [&] { train_data_parallel(spec_on(device("cuda:0")), {.process_group = gloo}); }),
             Contains("replicas on cuda:0 need an nccl process group, but the job's is gloo"));
}

TEST_CASE("trainer actors on a GPU train as on the CPU, one alone or two sharing a comm actor",
          "[actors][trainer][cuda]") {
  SKIP_WITHOUT_GPU();
  // Two actors per process go on cuda:0 and cuda:1, or both on cuda:0 where it is the only GPU
  // (trainer_spec::device); in one process the comm actor has no process group, so two check
  // the local reduction on GPUs (Note [Replicas on GPUs]).
  for (const int actors : {1, 2}) {
    INFO(actors << " trainer actor(s)");
    const job_report cpu = train_data_parallel(spec_on(kCPU), {.num_local = actors});
    const job_report gpu = train_data_parallel(spec_on(device("cuda:0")), {.num_local = actors});
    REQUIRE(cpu.epochs.size() == 2);
    REQUIRE(gpu.epochs.size() == 2);
    for (size_t e = 0; e < 2; ++e) {
      CHECK(gpu.epochs[e].samples == cpu.epochs[e].samples);
      CHECK(gpu.epochs[e].loss == Approx(cpu.epochs[e].loss).epsilon(1e-4));
      CHECK(gpu.epochs[e].accuracy == Approx(cpu.epochs[e].accuracy).margin(1.0 / 64));
    }
  }
}
