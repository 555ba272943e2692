// The layers of torch.nn that training an MLP or a small CNN needs, with PyTorch's defaults and
// initialisation: Linear, ReLU, Dropout, Sequential, BatchNorm1d/2d/3d (SyncBatchNorm, which
// needs a process group, is in comm/ddp/sync_batch_norm.hpp), Conv1d/Conv2d, MaxPool2d,
// AvgPool2d, AdaptiveAvgPool2d, Dropout2d and Flatten.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>

#include "core/nn/module.hpp"
#include "core/ops/window.hpp"
#include "core/random.hpp"

namespace actorch::nn {

/// y = x W^T + b. W and b start uniform in [-1/sqrt(in), 1/sqrt(in)] (PyTorch's
/// kaiming_uniform_(a=sqrt(5)) for W and its bias rule), drawn from `gen` or the default one.
class linear : public module {
public:
  linear(int64_t in_features, int64_t out_features, bool bias = true, generator* gen = nullptr);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Linear"; }
  std::shared_ptr<module> clone() const override;
  tensor weight;
  tensor bias;
};

class relu : public module {
public:
  tensor forward(const tensor& input) override;
  std::string name() const override { return "ReLU"; }
  std::shared_ptr<module> clone() const override;
};

class dropout : public module {
public:
  explicit dropout(double p = 0.5, generator* gen = nullptr);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Dropout"; }
  /// The clone draws from the same generator (generators are safe to share across threads).
  std::shared_ptr<module> clone() const override;

private:
  double p_;
  generator* gen_;
};

/// Channel-wise dropout: zeroes whole channels of (N, C, H, W) or (N, C, L) inputs.
class dropout2d : public module {
public:
  explicit dropout2d(double p = 0.5, generator* gen = nullptr);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Dropout2d"; }
  std::shared_ptr<module> clone() const override;

private:
  double p_;
  generator* gen_;
};

/// torch.nn.Conv2d over (N, C_in, H, W) or (C_in, H, W) inputs. weight is (C_out, C_in / groups,
/// kh, kw); weight and bias start uniform in +-1/sqrt(fan_in), fan_in = C_in / groups * kh * kw
/// (torch's kaiming_uniform_(a=sqrt(5)) and bias rule). padding_mode "zeros" only: "reflect",
/// "replicate" and "circular" are refused by name.
class conv2d : public module {
public:
  conv2d(int64_t in_channels, int64_t out_channels, int2 kernel_size, int2 stride = 1,
         conv_padding padding = 0, int2 dilation = 1, int64_t groups = 1, bool bias = true,
         const std::string& padding_mode = "zeros", generator* gen = nullptr);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Conv2d"; }
  std::shared_ptr<module> clone() const override;
  tensor weight;
  tensor bias;

private:
  int2 stride_, dilation_;
  conv_padding padding_;
  int64_t groups_;
};

/// torch.nn.Conv1d over (N, C_in, L) or (C_in, L) inputs; weight (C_out, C_in / groups, k).
class conv1d : public module {
public:
  conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         conv_padding padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true,
         const std::string& padding_mode = "zeros", generator* gen = nullptr);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Conv1d"; }
  std::shared_ptr<module> clone() const override;
  tensor weight;
  tensor bias;

private:
  int64_t stride_, dilation_;
  conv_padding padding_;
  int64_t groups_;
};

/// torch.nn.MaxPool2d (the indices come from functional max_pool2d_with_indices).
class max_pool2d : public module {
public:
  explicit max_pool2d(int2 kernel_size, std::optional<int2> stride = {}, int2 padding = 0,
                      int2 dilation = 1, bool ceil_mode = false)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding),
        dilation_(dilation), ceil_mode_(ceil_mode) {}
  tensor forward(const tensor& input) override;
  std::string name() const override { return "MaxPool2d"; }
  std::shared_ptr<module> clone() const override;

private:
  int2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// torch.nn.AvgPool2d.
class avg_pool2d : public module {
public:
  explicit avg_pool2d(int2 kernel_size, std::optional<int2> stride = {}, int2 padding = 0,
                      bool ceil_mode = false, bool count_include_pad = true,
                      std::optional<int64_t> divisor_override = {})
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding),
        ceil_mode_(ceil_mode), count_include_pad_(count_include_pad),
        divisor_override_(divisor_override) {}
  tensor forward(const tensor& input) override;
  std::string name() const override { return "AvgPool2d"; }
  std::shared_ptr<module> clone() const override;

private:
  int2 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

/// torch.nn.AdaptiveAvgPool2d: any input size to output_size.
class adaptive_avg_pool2d : public module {
public:
  explicit adaptive_avg_pool2d(int2 output_size) : output_size_(output_size) {}
  tensor forward(const tensor& input) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::shared_ptr<module> clone() const override;

private:
  int2 output_size_;
};

/// torch.nn.Flatten: dims start_dim..end_dim into one.
class flatten : public module {
public:
  explicit flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim_(start_dim), end_dim_(end_dim) {}
  tensor forward(const tensor& input) override { return input.flatten(start_dim_, end_dim_); }
  std::string name() const override { return "Flatten"; }
  std::shared_ptr<module> clone() const override;

private:
  int64_t start_dim_, end_dim_;
};

/// Children named "0", "1", ... applied in order.
class sequential : public module {
public:
  sequential() = default;
  sequential(std::initializer_list<std::shared_ptr<module>> layers);
  void push_back(std::shared_ptr<module> layer);
  tensor forward(const tensor& input) override;
  std::string name() const override { return "Sequential"; }
  /// Clones every layer.
  std::shared_ptr<module> clone() const override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<module>& operator[](size_t i) const { return layers_.at(i); }

private:
  std::vector<std::shared_ptr<module>> layers_;
};

/// Batch normalisation over the channel dim 1 of (N, C, *) inputs: torch's _BatchNorm, which
/// BatchNorm1d/2d/3d and SyncBatchNorm share. momentum unset means a cumulative average, as
/// PyTorch's momentum=None; without running stats (track_running_stats=false) batch statistics
/// normalise in evaluation too.
class batch_norm_base : public module {
public:
  tensor forward(const tensor& input) override;
  /// "SyncBatchNorm" once synchronised.
  std::string name() const override { return sync_ ? "SyncBatchNorm" : kind_; }
  int64_t num_features() const { return num_features_; }
  /// Makes this layer a SyncBatchNorm: in training, batch statistics come from every replica's
  /// batch through `all_reduce_sum` (functional::sync_batch_norm). See
  /// dist::convert_sync_batchnorm, which sets it on every BatchNorm of a model. An empty
  /// function makes it local again.
  void sync_statistics(std::function<tensor(const tensor&)> all_reduce_sum) {
    sync_ = std::move(all_reduce_sum);
  }
  bool synchronised() const { return sync_ != nullptr; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  /// The same kind of BatchNorm, its values copied. A synchronised one (SyncBatchNorm) is not
  /// cloned: its statistics belong to its process group (torch's DataParallel refuses it too).
  std::shared_ptr<module> clone() const override;

  tensor weight, bias;                                   // affine parameters (or undefined)
  tensor running_mean, running_var, num_batches_tracked; // buffers (or undefined)

protected:
  /// `kind` names the layer in messages; `dims` lists the input ranks it takes (empty: any
  /// rank of 2 or more).
  batch_norm_base(std::string kind, std::vector<int64_t> dims, int64_t num_features, double eps,
                  std::optional<double> momentum, bool affine, bool track_running_stats);

private:
  std::string kind_;
  std::vector<int64_t> dims_; // the input ranks it takes (empty: 2 or more)
  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  std::function<tensor(const tensor&)> sync_;
};

/// (N, C) or (N, C, L) inputs.
class batch_norm1d : public batch_norm_base {
public:
  explicit batch_norm1d(int64_t num_features, double eps = 1e-5,
                        std::optional<double> momentum = 0.1, bool affine = true,
                        bool track_running_stats = true)
      : batch_norm_base("BatchNorm1d", {2, 3}, num_features, eps, momentum, affine,
                        track_running_stats) {}
};

/// (N, C, H, W) inputs: images.
class batch_norm2d : public batch_norm_base {
public:
  explicit batch_norm2d(int64_t num_features, double eps = 1e-5,
                        std::optional<double> momentum = 0.1, bool affine = true,
                        bool track_running_stats = true)
      : batch_norm_base("BatchNorm2d", {4}, num_features, eps, momentum, affine,
                        track_running_stats) {}
};

/// (N, C, D, H, W) inputs: volumes and clips.
class batch_norm3d : public batch_norm_base {
public:
  explicit batch_norm3d(int64_t num_features, double eps = 1e-5,
                        std::optional<double> momentum = 0.1, bool affine = true,
                        bool track_running_stats = true)
      : batch_norm_base("BatchNorm3d", {5}, num_features, eps, momentum, affine,
                        track_running_stats) {}
};

} // namespace actorch::nn
