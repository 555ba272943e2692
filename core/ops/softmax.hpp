// softmax and log_softmax along one dim, with their backward functions side by side for
// autograd. Forward subtracts the max before exp (numerically stable); the loops are in
// kernels/cpu/softmax.
#pragma once

#include "core/tensor.hpp"

namespace actorch {

/// exp(t) / sum(exp(t), dim), the result in t's dtype (float16 and bfloat16 compute in float).
/// A 0-dim input is a softmax over one element (1). @pre t is floating point: integer and bool
/// inputs throw, as in PyTorch.
tensor softmax(const tensor& t, int64_t dim);
/// t - log(sum(exp(t), dim)), computed without forming softmax first. Same rules as softmax.
tensor log_softmax(const tensor& t, int64_t dim);

/// The gradient of softmax: out * (grad_out - sum(grad_out * out, dim)).
/// @pre out = softmax(x, dim); grad_out has out's shape and dtype.
tensor softmax_backward(const tensor& grad_out, const tensor& out, int64_t dim);
/// The gradient of log_softmax: grad_out - exp(out) * sum(grad_out, dim).
/// @pre out = log_softmax(x, dim); grad_out has out's shape and dtype.
tensor log_softmax_backward(const tensor& grad_out, const tensor& out, int64_t dim);

} // namespace actorch
