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

/// Where a checkpoint left training.
struct resume_point {
  int64_t epoch = 0, step = 0, total_steps = 0;
  std::optional<data::loader_state> loader; // with a dataset
};

/// Loads the checkpoint at `path` into `model` and `opt`; where it stopped. `with_loader`: the
/// loader's position must be there too. Throws naming the file and what is missing or
/// malformed.
resume_point load_training_checkpoint(const std::string& path, nn::module& model,
                                      optim::optimizer& opt, bool with_loader);

/// Writes it atomically: model, optimizer, `epoch`, `step`, `total_steps` and, with a loader,
/// its position (at step 0: epoch `epoch` from its start).
void save_training_checkpoint(const std::string& path, const nn::module& model,
                              const optim::optimizer_state& opt, int64_t epoch, int64_t step,
                              int64_t total_steps, const data::data_loader* loader);

} // namespace actorch::actors
