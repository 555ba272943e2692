// torch.optim: optimizers over parameter groups, with PyTorch's update rules and defaults, and
// a state that can be saved and restored (tensors plus hyper-parameters as strings).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::optim {

/// An optimizer's state in checkpointable form: named tensors ("state.3.momentum_buffer") and
/// string metadata ("param_groups.0.lr" -> "0.01").
struct optimizer_state {
  std::vector<std::pair<std::string, tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

class optimizer {
public:
  virtual ~optimizer() = default;
  optimizer(const optimizer&) = delete;
  optimizer& operator=(const optimizer&) = delete;

  /// One update of every parameter that has a gradient (parameters without one are skipped).
  virtual void step() = 0;
  /// Clears (set_to_none, PyTorch 2's default) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<tensor>& params() const { return params_; }

  optimizer_state state_dict() const;
  /// Restores a state_dict of an optimizer of the same kind over the same parameters; checks
  /// everything (kind, shapes, hyper-parameters) before changing anything.
  void load_state_dict(const optimizer_state& state);

protected:
  optimizer(std::vector<tensor> params, double lr, const char* kind);
  /// Per-parameter state tensors by name, created on first use.
  std::map<std::string, tensor>& state_of(size_t param_index) { return state_[param_index]; }
  /// Hyper-parameters other than lr, as name -> value, for state_dict.
  virtual std::map<std::string, double> hyper_parameters() const = 0;
  virtual void set_hyper_parameter(const std::string& name, double value) = 0;

  std::vector<tensor> params_;
  double lr_;

private:
  std::string kind_;
  std::map<size_t, std::map<std::string, tensor>> state_;
};

} // namespace actorch::optim
