// save_checkpoint / load_checkpoint (checkpoint.hpp).
#include "core/serialize/checkpoint.hpp"

#include "core/serialize/safetensors.hpp"

namespace actorch {

void save_checkpoint(const std::string& path, const nn::module& model, const optim::optimizer& opt,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, tensor>> tensors;
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    ACTORCH_CHECK(k.rfind("optim.", 0) != 0, "save_checkpoint: ", path, ": metadata key \"", k,
                  "\" is reserved (\"optim.\" keys hold the optimizer's state)");
    meta[k] = v;
  }
  for (const auto& [n, t] : model.state_dict())
    tensors.emplace_back("model." + n, t);
  const auto os = opt.state_dict();
  for (const auto& [n, t] : os.tensors)
    tensors.emplace_back("optim." + n, t);
  for (const auto& [k, v] : os.metadata)
    meta["optim." + k] = v;
  save_safetensors(path, tensors, meta);
}

nn::named_tensors checkpoint_model_state(const std::string& path) {
  nn::named_tensors model_state;
  for (auto& [n, t] : load_safetensors(path).tensors)
    if (n.rfind("model.", 0) == 0)
      model_state.emplace_back(n.substr(6), std::move(t));
  return model_state;
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::module& model,
                                                   optim::optimizer& opt) {
  const safetensors_file f = load_safetensors(path);
  nn::named_tensors model_state;
  optim::optimizer_state opt_state;
  for (const auto& [n, t] : f.tensors) {
    if (n.rfind("model.", 0) == 0)
      model_state.emplace_back(n.substr(6), t);
    else if (n.rfind("optim.", 0) == 0)
      opt_state.tensors.emplace_back(n.substr(6), t);
    else
      ACTORCH_FAIL("load_checkpoint: ", path, ": unexpected tensor \"", n,
                   "\" (expected \"model.*\" and \"optim.*\" keys)");
  }
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : f.metadata) {
    if (k.rfind("optim.", 0) == 0)
      opt_state.metadata[k.substr(6)] = v;
    else
      meta[k] = v;
  }
  // A model state saved from a DistributedDataParallel ("model.module.0.weight") loads into the
  // bare model too: the prefix is consumed, as PyTorch users strip it.
  nn::consume_ddp_prefix(model_state, model);
  // Each load checks everything before it writes; if the optimizer's fails after the model's
  // succeeded, the model gets its old state back, so a bad file changes nothing.
  nn::named_tensors backup;
  for (const auto& [n, t] : model.state_dict())
    backup.emplace_back(n, t.clone());
  model.load_state_dict(model_state);
  try {
    opt.load_state_dict(opt_state);
  } catch (...) {
    model.load_state_dict(backup);
    throw;
  }
  return meta;
}

} // namespace actorch
