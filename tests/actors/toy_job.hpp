// The small training job the trainer tests share: a fixed toy dataset and an MLP spec.
#pragma once

#include <string>

#include "actors/trainer.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

namespace actorch::test {

inline constexpr int64_t kSamples = 256;

// 256 samples of 8 features and 4 classes, fixed.
inline data::dataset_ptr toy_dataset() {
  generator g(7);
  const tensor x = randn({kSamples, 8}, {}, &g);
  const tensor y = randint(0, 4, {kSamples}, {}, &g);
  return std::make_shared<data::tensor_dataset>(std::vector<tensor>{x, y});
}

// An MLP trained with SGD and momentum; `batch` per replica, shuffled by DistributedSampler.
inline actors::trainer_spec toy_spec(int64_t batch, const std::string& checkpoint) {
  actors::trainer_spec s;
  s.make_model = [](const actors::replica_info& r) {
    // Different values per replica: DDP's construction broadcast must make them agree.
    generator g(100 + uint64_t(r.rank));
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
    return actors::step_result{nn::functional::cross_entropy(out, y), x.size(0),
                               out.argmax(1).eq(y).sum().item<int64_t>()};
  };
  s.dataset = toy_dataset();
  s.loader.batch_size = batch;
  s.loader.shuffle = true;
  s.epochs = 2;
  s.seed = 3;
  s.checkpoint = checkpoint;
  return s;
}

} // namespace actorch::test
