// torch.optim.SGD and torch.optim.Adam with PyTorch's update rules and defaults.
#pragma once

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

private:
  optimizer& opt_;
  int64_t step_size_;
  double gamma_;
  double base_lr_;
  int64_t epoch_ = 0;
};

} // namespace actorch::optim
