// torch.nn.functional: the stateless forms of the layers and losses, differentiable through
// autograd (each is a composition of core ops).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace actorch::nn::functional {

enum class reduction { none, mean, sum };
/// "none", "mean" or "sum"; anything else throws naming the string.
reduction parse_reduction(const std::string& s);

/// input @ weight^T + bias. input (*, in), weight (out, in), bias (out) or undefined.
tensor linear(const tensor& input, const tensor& weight, const tensor& bias = {});
tensor relu(const tensor& input);
/// Zeroes elements with probability p and scales the rest by 1 / (1 - p) when training.
tensor dropout(const tensor& input, double p = 0.5, bool training = true, generator* gen = nullptr);
/// Zeroes whole channels (dims 0 and 1 index them) of a 3-D or 4-D input with probability p and
/// scales the rest by 1 / (1 - p) when training (torch 1.13's dropout2d, which reads a 3-D
/// input as (N, C, L)).
tensor dropout2d(const tensor& input, double p = 0.5, bool training = true,
                 generator* gen = nullptr);
/// Batch normalisation over the channel dim 1 of an (N, C, *) input (torch's F.batch_norm, for
/// BatchNorm1d/2d/3d alike). In training the batch statistics normalise and update the running
/// ones (momentum, or a cumulative average when momentum is unset).
tensor batch_norm(const tensor& input, tensor running_mean, tensor running_var,
                  const tensor& weight, const tensor& bias, bool training,
                  std::optional<double> momentum = 0.1, double eps = 1e-5,
                  tensor num_batches_tracked = {});

/// Sums a float64 tensor over every replica of a data-parallel job (a collective).
using all_reduce_sum_fn = std::function<tensor(const tensor&)>;

/// batch_norm in training mode with statistics over the union of every replica's batch
/// (torch.nn.SyncBatchNorm): the per-channel sums, sums of squares and counts go through
/// `all_reduce_sum` in forward, and the sums of the output gradient terms in backward, so the
/// result matches batch_norm over the concatenated batches. Every replica must call it.
tensor sync_batch_norm(const tensor& input, tensor running_mean, tensor running_var,
                       const tensor& weight, const tensor& bias, std::optional<double> momentum,
                       double eps, tensor num_batches_tracked,
                       const all_reduce_sum_fn& all_reduce_sum);

tensor mse_loss(const tensor& input, const tensor& target, reduction r = reduction::mean);
/// input (N, C) log-probabilities or (C); target (N) or () class indices (int64).
tensor nll_loss(const tensor& input, const tensor& target, const tensor& weight = {},
                int64_t ignore_index = -100, reduction r = reduction::mean);
/// log_softmax over dim 1 (dim 0 for a (C) input) followed by nll_loss.
tensor cross_entropy(const tensor& input, const tensor& target, const tensor& weight = {},
                     int64_t ignore_index = -100, reduction r = reduction::mean);

} // namespace actorch::nn::functional
