// train_data_parallel's checkpoints: the model, the optimizer, where training stands (epoch,
// step, total steps) and the loader's position, as safetensors metadata; resume reads them
// back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "actors/data_loader.hpp"

namespace actorch {
namespace nn {
class module;
}
namespace optim {
class optimizer;
struct optimizer_state;
} // namespace optim
} // namespace actorch

namespace actorch::actors {

/// Where the data stands (Note [Resuming at another world size] in replica_run.cpp): the
/// replicas of the job (0: a checkpoint from before it was recorded), the epoch order's positions
/// its steps covered, and whether the loader is over a segment of the order (a list of indices)
/// rather than the job's DistributedSampler.
struct data_position {
  int64_t world_size = 0, position = 0;
  bool segment = false;
};

/// Where a checkpoint left training.
struct resume_point {
  int64_t epoch = 0, step = 0, total_steps = 0;
  std::optional<data::loader_state> loader; // with a dataset
  data_position data;                       // with a dataset
};

/// Loads the checkpoint at `path` into `model` and `opt`; where it stopped. `with_loader`: the
/// loader's position must be there too. Throws naming the file and what is missing or
/// malformed.
resume_point load_training_checkpoint(const std::string& path, nn::module& model,
                                      optim::optimizer& opt, bool with_loader);

/// Writes it atomically: model, optimizer, `epoch`, `step`, `total_steps` and, with a loader,
/// its position and `data` (at step 0: epoch `epoch` from its start).
void save_training_checkpoint(const std::string& path, const nn::module& model,
                              const optim::optimizer_state& opt, int64_t epoch, int64_t step,
                              int64_t total_steps, const data::data_loader* loader,
                              const data_position& data = {});

} // namespace actorch::actors
