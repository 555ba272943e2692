// Trainer actors on a GPU (trainer_spec::device): the job's checks everywhere, and, tagged
// [cuda], a GPU replica training as the CPU one does (skipped, saying why, without a GPU).
#include <catch2/catch.hpp>

#include "actors/trainer.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/store/hash_store.hpp"
#include "core/core.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/gpu.hpp"

using namespace actorch;
using namespace actorch::actors;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

// 128 samples of 8 features and 4 classes; an MLP with SGD and momentum, 2 epochs.
trainer_spec spec_on(const device& d) {
  trainer_spec s;
  s.make_model = [](const replica_info&) {
    generator g(5);
    return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
        std::make_shared<nn::linear>(8, 16, true, &g), std::make_shared<nn::relu>(),
        std::make_shared<nn::linear>(16, 4, true, &g)});
  };
  s.make_optimizer = [](nn::module& m) {
    return std::make_unique<optim::sgd>(m.parameters(),
                                        optim::sgd_options{.lr = 0.1, .momentum = 0.9});
  };
  s.forward = [](dist::distributed_data_parallel& m, const data::sample& b) {
    const tensor x = b[0].as_tensor(), y = b[1].as_tensor();
    const tensor out = m(x);
    return step_result{nn::functional::cross_entropy(out, y), x.size(0),
                       out.argmax(1).eq(y).sum().item<int64_t>()};
  };
  generator g(7);
  s.dataset = std::make_shared<data::tensor_dataset>(
      std::vector<tensor>{randn({128, 8}, {}, &g), randint(0, 4, {128}, {}, &g)});
  s.loader.batch_size = 16;
  s.loader.shuffle = true;
  s.loader.num_workers = 1;
  s.epochs = 2;
  s.seed = 3;
  s.device = d;
  return s;
}

} // namespace

TEST_CASE("GPU trainer jobs refuse what they cannot run, naming it",
          "[actors][trainer][cuda_host]") {
  CHECK_THAT(
      test::error_of([] { train_data_parallel(spec_on(device("cuda:0")), {.num_local = 2}); }),
      Contains("2 trainer actors on GPUs in one process are not supported yet"));
  auto gloo = std::make_shared<dist::process_group_gloo>(std::make_shared<dist::hash_store>(2s), 0,
                                                         1, test::short_timeout(2000));
  CHECK_THAT(test::error_of(
                 [&] { train_data_parallel(spec_on(device("cuda:0")), {.process_group = gloo}); }),
             Contains("replicas on cuda:0 need an nccl process group, but the job's is gloo"));
}

TEST_CASE("a trainer actor on a GPU trains as one on the CPU", "[actors][trainer][cuda]") {
  SKIP_WITHOUT_GPU();
  const job_report cpu = train_data_parallel(spec_on(kCPU));
  const job_report gpu = train_data_parallel(spec_on(device("cuda:0")));
  REQUIRE(cpu.epochs.size() == 2);
  REQUIRE(gpu.epochs.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(gpu.epochs[e].samples == cpu.epochs[e].samples);
    CHECK(gpu.epochs[e].loss == Approx(cpu.epochs[e].loss).epsilon(1e-4));
    CHECK(gpu.epochs[e].accuracy == Approx(cpu.epochs[e].accuracy).margin(1.0 / 64));
  }
}
