// Linear, ReLU, Dropout, Sequential, BatchNorm, and the convolution, pooling and flatten layers.
#include "core/nn/layers.hpp"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.hpp"
#include "core/nn/functional.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"

namespace actorch::nn {

namespace F = functional;

namespace {
// Uniform in +-1/sqrt(fan_in): torch's kaiming_uniform_(a=sqrt(5)) for a weight (bound =
// sqrt(6 / ((1 + a^2) fan_in)) = 1/sqrt(fan_in)) and its bias rule, fan_in being the weight's
// size(1) times its kernel's size.
tensor uniform_fan_in(const shape_t& shape, int64_t fan_in, generator* gen) {
  const double bound = 1.0 / std::sqrt(double(fan_in));
  return rand(shape, {}, gen).mul_(2 * bound).sub_(bound);
}
} // namespace

linear::linear(int64_t in_features, int64_t out_features, bool with_bias, generator* gen) {
  ACTORCH_CHECK(in_features > 0 && out_features > 0,
                "Linear: in_features and out_features must "
                "be positive but got ",
                in_features, " and ", out_features);
  weight =
      register_parameter("weight", uniform_fan_in({out_features, in_features}, in_features, gen));
  if (with_bias)
    bias = register_parameter("bias", uniform_fan_in({out_features}, in_features, gen));
}

tensor linear::forward(const tensor& input) {
  return F::linear(input, weight, bias);
}

std::shared_ptr<module> linear::clone() const {
  generator scratch(0); // the initial values are overwritten: leave the default stream alone
  return copy_state_into(
      std::make_shared<linear>(weight.size(1), weight.size(0), bias.defined(), &scratch));
}

tensor relu::forward(const tensor& input) {
  return F::relu(input);
}

std::shared_ptr<module> relu::clone() const {
  return copy_state_into(std::make_shared<relu>());
}

dropout::dropout(double p, generator* gen) : p_(p), gen_(gen) {
  ACTORCH_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
}

tensor dropout::forward(const tensor& input) {
  return F::dropout(input, p_, is_training(), gen_);
}

std::shared_ptr<module> dropout::clone() const {
  return copy_state_into(std::make_shared<dropout>(p_, gen_));
}

dropout2d::dropout2d(double p, generator* gen) : p_(p), gen_(gen) {
  ACTORCH_CHECK(p >= 0 && p <= 1, "Dropout2d: probability has to be between 0 and 1, but got ", p);
}

tensor dropout2d::forward(const tensor& input) {
  return F::dropout2d(input, p_, is_training(), gen_);
}

std::shared_ptr<module> dropout2d::clone() const {
  return copy_state_into(std::make_shared<dropout2d>(p_, gen_));
}

namespace {

void check_conv_args(const char* layer, int64_t in, int64_t out, int64_t groups,
                     const std::string& padding_mode) {
  ACTORCH_CHECK(in > 0 && out > 0, layer,
                ": in_channels and out_channels must be positive but got ", in, " and ", out);
  ACTORCH_CHECK(groups > 0, layer, ": groups must be a positive integer, got ", groups);
  ACTORCH_CHECK(in % groups == 0, layer, ": in_channels must be divisible by groups (", in, " and ",
                groups, ")");
  ACTORCH_CHECK(out % groups == 0, layer, ": out_channels must be divisible by groups (", out,
                " and ", groups, ")");
  ACTORCH_CHECK(padding_mode == "zeros", layer, ": padding_mode '", padding_mode,
                "' is not supported by actorch, only 'zeros' (torch's default; reflect, "
                "replicate and circular padding are not implemented)");
}

} // namespace

conv2d::conv2d(int64_t in, int64_t out, int2 k, int2 stride, conv_padding padding, int2 dilation,
               int64_t groups, bool with_bias, const std::string& padding_mode, generator* gen)
    : stride_(stride), dilation_(dilation), padding_(std::move(padding)), groups_(groups) {
  check_conv_args("Conv2d", in, out, groups, padding_mode);
  ACTORCH_CHECK(k.h > 0 && k.w > 0, "Conv2d: kernel_size must be positive but got (", k.h, ", ",
                k.w, ")");
  const int64_t fan_in = in / groups * k.h * k.w;
  weight = register_parameter("weight", uniform_fan_in({out, in / groups, k.h, k.w}, fan_in, gen));
  if (with_bias)
    bias = register_parameter("bias", uniform_fan_in({out}, fan_in, gen));
}

tensor conv2d::forward(const tensor& input) {
  return actorch::conv2d(input, weight, bias, stride_, padding_, dilation_, groups_);
}

std::shared_ptr<module> conv2d::clone() const {
  generator scratch(0); // the initial values are overwritten: leave the default stream alone
  return copy_state_into(std::make_shared<conv2d>(
      weight.size(1) * groups_, weight.size(0), int2(weight.size(2), weight.size(3)), stride_,
      padding_, dilation_, groups_, bias.defined(), "zeros", &scratch));
}

conv1d::conv1d(int64_t in, int64_t out, int64_t k, int64_t stride, conv_padding padding,
               int64_t dilation, int64_t groups, bool with_bias, const std::string& padding_mode,
               generator* gen)
    : stride_(stride), dilation_(dilation), padding_(std::move(padding)), groups_(groups) {
  check_conv_args("Conv1d", in, out, groups, padding_mode);
  ACTORCH_CHECK(k > 0, "Conv1d: kernel_size must be positive but got ", k);
  const int64_t fan_in = in / groups * k;
  weight = register_parameter("weight", uniform_fan_in({out, in / groups, k}, fan_in, gen));
  if (with_bias)
    bias = register_parameter("bias", uniform_fan_in({out}, fan_in, gen));
}

tensor conv1d::forward(const tensor& input) {
  return actorch::conv1d(input, weight, bias, stride_, padding_, dilation_, groups_);
}

std::shared_ptr<module> conv1d::clone() const {
  generator scratch(0);
  return copy_state_into(std::make_shared<conv1d>(weight.size(1) * groups_, weight.size(0),
                                                  weight.size(2), stride_, padding_, dilation_,
                                                  groups_, bias.defined(), "zeros", &scratch));
}

tensor max_pool2d::forward(const tensor& input) {
  return actorch::max_pool2d(input, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::shared_ptr<module> max_pool2d::clone() const {
  return copy_state_into(
      std::make_shared<max_pool2d>(kernel_, stride_, padding_, dilation_, ceil_mode_));
}

tensor avg_pool2d::forward(const tensor& input) {
  return actorch::avg_pool2d(input, kernel_, stride_, padding_, ceil_mode_, count_include_pad_,
                             divisor_override_);
}

std::shared_ptr<module> avg_pool2d::clone() const {
  return copy_state_into(std::make_shared<avg_pool2d>(kernel_, stride_, padding_, ceil_mode_,
                                                      count_include_pad_, divisor_override_));
}

tensor adaptive_avg_pool2d::forward(const tensor& input) {
  return actorch::adaptive_avg_pool2d(input, output_size_);
}

std::shared_ptr<module> adaptive_avg_pool2d::clone() const {
  return copy_state_into(std::make_shared<adaptive_avg_pool2d>(output_size_));
}

std::shared_ptr<module> flatten::clone() const {
  return copy_state_into(std::make_shared<flatten>(start_dim_, end_dim_));
}

sequential::sequential(std::initializer_list<std::shared_ptr<module>> layers) {
  for (const auto& l : layers)
    push_back(l);
}

void sequential::push_back(std::shared_ptr<module> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

std::shared_ptr<module> sequential::clone() const {
  auto out = std::make_shared<sequential>();
  for (const auto& l : layers_)
    out->push_back(l->clone()); // each with its values, flags and mode
  out->copy_training_modes_from(*this);
  return out;
}

tensor sequential::forward(const tensor& input) {
  tensor x = input;
  for (const auto& l : layers_)
    x = l->forward(x);
  return x;
}

batch_norm_base::batch_norm_base(std::string kind, std::vector<int64_t> dims, int64_t num_features,
                                 double eps, std::optional<double> momentum, bool affine,
                                 bool track_running_stats)
    : kind_(std::move(kind)), dims_(std::move(dims)), num_features_(num_features), eps_(eps),
      momentum_(momentum) {
  ACTORCH_CHECK(num_features > 0, kind_, ": num_features must be positive but got ", num_features);
  ACTORCH_CHECK(eps > 0, kind_, ": eps must be positive but got ", eps);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", zeros({}, {.dtype = dtype::int64}));
  }
}

std::shared_ptr<module> batch_norm_base::clone() const {
  ACTORCH_CHECK(!sync_, "SyncBatchNorm cannot be cloned or replicated: its statistics come from "
                        "its process group (use DistributedDataParallel, as torch says)");
  auto fresh = std::shared_ptr<batch_norm_base>(new batch_norm_base(
      kind_, dims_, num_features_, eps_, momentum_, weight.defined(), running_mean.defined()));
  return copy_state_into(fresh);
}

tensor batch_norm_base::forward(const tensor& input) {
  check_defined(kind_.c_str(), {&input});
  // torch's messages: "expected 4D input (got 3D input)".
  if (dims_.empty()) {
    ACTORCH_CHECK(input.dim() >= 2, name(), ": expected at least 2D input (got ", input.dim(),
                  "D input)");
  } else if (std::find(dims_.begin(), dims_.end(), input.dim()) == dims_.end()) {
    std::string want;
    for (size_t i = 0; i < dims_.size(); ++i)
      want += (i == 0 ? "" : " or ") + std::to_string(dims_[i]) + "D";
    ACTORCH_CHECK(false, name(), ": expected ", want, " input (got ", input.dim(), "D input)");
  }
  ACTORCH_CHECK(input.size(1) == num_features_, name(), ": expected input with ", num_features_,
                " channels in dim 1 but got shape ", shape_str(input.sizes()));
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (sync_ && use_batch_stats)
    return F::sync_batch_norm(input, running_mean, running_var, weight, bias, momentum_, eps_,
                              num_batches_tracked, sync_);
  return F::batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, momentum_,
                       eps_, num_batches_tracked);
}

} // namespace actorch::nn
