// torch.optim.SGD and torch.optim.Adam with PyTorch's update rules and defaults.
#pragma once

#include <map>
#include <string>

#include "core/optim/optimizer.hpp"

namespace actorch::optim {

struct sgd_options {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

/// For each parameter p with gradient g:
///   g += weight_decay * p;  buf = g (first step) or momentum * buf + (1 - dampening) * g;
///   g = nesterov ? g + momentum * buf : buf (when momentum != 0);  p -= lr * g.
class sgd : public optimizer {
public:
  sgd(std::vector<tensor> params, const sgd_options& opts);
  void step() override;
  const sgd_options& options() const { return opts_; }

protected:
  std::map<std::string, double> hyper_parameters() const override;
  void set_hyper_parameter(const std::string& name, double value) override;

private:
  sgd_options opts_;
};

struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

/// Adam (Kingma and Ba), in PyTorch's form: with t the step count,
///   g += weight_decay * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
///   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class adam : public optimizer {
public:
  adam(std::vector<tensor> params, const adam_options& opts);
  void step() override;
  const adam_options& options() const { return opts_; }

protected:
  std::map<std::string, double> hyper_parameters() const override;
  void set_hyper_parameter(const std::string& name, double value) override;

private:
  adam_options opts_;
};

/// torch.optim.lr_scheduler.StepLR: lr = base_lr * gamma^(epoch / step_size), advanced by step().
class step_lr {
public:
  step_lr(optimizer& opt, int64_t step_size, double gamma = 0.1);
  void step();
  int64_t last_epoch() const { return epoch_; }
  double get_last_lr() const { return opt_.lr(); }

  /// torch's StepLR.state_dict() as numbers: step_size, gamma, base_lr, last_epoch, last_lr
  /// (torch's base_lrs and _last_lr hold one value per parameter group; actorch's optimizers
  /// have one group). save_checkpoint writes it in torch's layout for .pt files.
  std::map<std::string, double> state_dict() const;
  /// Restores what state_dict() gave, the optimizer's lr included. @throws actorch::error
  /// naming a missing key or a value out of range, before anything changes.
  void load_state_dict(const std::map<std::string, double>& state);
  /// What load_state_dict checks, without changing anything.
  static void check_state(const std::map<std::string, double>& state);

private:
  optimizer& opt_;
  int64_t step_size_;
  double gamma_;
  double base_lr_;
  int64_t epoch_ = 0;
};

} // namespace actorch::optim
