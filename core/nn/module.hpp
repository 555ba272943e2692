// nn.Module: a tree of modules owning named parameters and buffers. Names and order follow
// PyTorch's, so state_dict keys ("0.weight", "2.bias", "bn.running_mean") match checkpoints
// written by PyTorch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::nn {

using named_tensors = std::vector<std::pair<std::string, tensor>>;

/// What load_state_dict did not match (torch's _IncompatibleKeys).
struct incompatible_keys {
  std::vector<std::string> missing_keys;    // the module's keys the state did not have
  std::vector<std::string> unexpected_keys; // the state's keys the module does not have
};

class module {
public:
  virtual ~module() = default;
  module() = default;
  module(const module&) = delete;
  module& operator=(const module&) = delete;

  /// The single-input forward pass of the module (most layers); modules with other
  /// signatures provide their own call operators.
  virtual tensor forward(const tensor& input);
  tensor operator()(const tensor& input) { return forward(input); }

  /// Parameters of this module and (with recurse) its descendants, in registration order,
  /// with dotted names.
  named_tensors named_parameters(bool recurse = true) const;
  std::vector<tensor> parameters(bool recurse = true) const;
  named_tensors named_buffers(bool recurse = true) const;
  std::vector<tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<module>>> named_children() const;
  std::vector<std::shared_ptr<module>> children() const;

  /// Sets training mode on this module and every descendant (Dropout, BatchNorm read it).
  module& train(bool on = true);
  module& eval() { return train(false); }
  bool is_training() const { return training_; }
  /// Takes each submodule's training mode from the same place in `other`, a module of the
  /// same structure (a clone or replica keeps a BatchNorm left in eval inside a model in
  /// train, as torch's deepcopy and replicate do).
  void copy_training_modes_from(const module& other);

  /// Parameters then buffers of each module, depth first, as torch's state_dict orders them.
  /// The tensors are detached views of the module's own (no copy).
  named_tensors state_dict() const;
  /// Copies `state` into the module's parameters and buffers. When strict, a missing or an
  /// unexpected key is an error; otherwise they are skipped and returned, as torch's
  /// strict=False does. Every check (keys, shapes, dtypes) happens before anything is
  /// written, so a failed load leaves the module untouched. Errors name the key.
  incompatible_keys load_state_dict(const named_tensors& state, bool strict = true);

  /// Clears (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  /// Converts every parameter and floating point buffer to `t`.
  module& to(dtype t);
  /// Moves every parameter and buffer to `d` (model.to("cuda:0")); each tensor keeps its
  /// identity, so optimizers made before still hold the module's parameters.
  module& to(const device& d);

  virtual std::string name() const { return "Module"; }

  /// A deep copy: a module of the same kind whose parameters and buffers are new tensors with
  /// this one's values, requires_grad flags and training mode (libtorch's Cloneable::clone;
  /// what data_parallel's replicate makes its replicas with). The built-in layers have it; a
  /// module of your own overrides it (construct yours, then return copy_state_into(it)), or
  /// this throws naming it.
  virtual std::shared_ptr<module> clone() const;

protected:
  /// For clone(): gives `fresh` (built with the same shapes) this module's values, flags and
  /// mode, and returns it.
  std::shared_ptr<module> copy_state_into(std::shared_ptr<module> fresh) const;

  tensor& register_parameter(const std::string& name, tensor t, bool requires_grad = true);
  tensor& register_buffer(const std::string& name, tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

private:
  void add_child(const std::string& name, std::shared_ptr<module> m);
  /// f on every parameter and buffer of this module and its children (what to() converts).
  void apply_to_tensors(const std::function<void(tensor&)>& f);
  void collect(const std::string& prefix, bool params, bool buffers, named_tensors& out,
               bool recurse) const;

  named_tensors parameters_;
  named_tensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<module>>> children_;
  bool training_ = true;
};

/// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: strips `prefix` from every
/// key that starts with it, in place (a DistributedDataParallel state dict's "module." keys
/// become the wrapped model's own).
void consume_prefix_in_state_dict_if_present(named_tensors& state, const std::string& prefix);

/// For a state dict that may come through DistributedDataParallel: consumes "module." when
/// every key has it and `model`'s own keys do not (so a model with a child named "module"
/// still loads its own keys as they are). What DDP's load_state_dict and load_checkpoint do.
void consume_ddp_prefix(named_tensors& state, const module& model);

} // namespace actorch::nn
