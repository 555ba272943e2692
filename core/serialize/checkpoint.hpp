// A training checkpoint in one file: in safetensors, the model's state dict ("model.*"), the
// optimizer's ("optim.*", its scalar state as "optim.*" metadata) and the caller's own
// metadata (epoch, step, loader position); for a path ending in .pt or .pth, PyTorch's format
// with torch's layout, {"model": state dict, "optimizer": torch's optimizer state dict, and
// the metadata as strings}, which torch's model.load_state_dict and optimizer.load_state_dict
// take (Note [Optimizer state dicts in torch's layout] in checkpoint.cpp). Saved atomically
// (tmp, fsync, rename), so a crash mid-save leaves the previous checkpoint whole.
#pragma once

#include <map>
#include <string>

#include "core/nn/module.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch {

namespace optim {
class step_lr;
}

/// With a `scheduler`, its state_dict() too: "scheduler.*" metadata in safetensors, and in a .pt
/// file a "scheduler" entry in torch's StepLR.state_dict() layout (which torch's
/// scheduler.load_state_dict(checkpoint["scheduler"]) takes).
void save_checkpoint(const std::string& path, const nn::module& model, const optim::optimizer& opt,
                     const std::map<std::string, std::string>& metadata,
                     const optim::step_lr* scheduler = nullptr);
/// The same with the optimizer's state given (a sharded optimizer's, consolidated).
void save_checkpoint(const std::string& path, const nn::module& model,
                     const optim::optimizer_state& opt_state,
                     const std::map<std::string, std::string>& metadata,
                     const optim::step_lr* scheduler = nullptr);

/// Loads into `model` and `opt`, and `scheduler` when given (every check before any write: a
/// bad file, or one without a scheduler's state when one is asked for, leaves them as they
/// were) and returns the caller's metadata. Errors name the file and the key.
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::module& model,
                                                   optim::optimizer& opt,
                                                   optim::step_lr* scheduler = nullptr);

/// The model's state dict a checkpoint holds (its "model.*" tensors, without the prefix), as
/// torch's module.load_state_dict takes it.
nn::named_tensors checkpoint_model_state(const std::string& path);

} // namespace actorch
