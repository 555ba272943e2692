// Elementwise CUDA kernels: the twins of kernels/cpu/elementwise.hpp, with the same contracts
// and the same per-element functors (kernels/functors.hpp). They run on the current stream of
// the current device (kernels/cuda/context.hpp); every pointer of `loop` is device memory.
#pragma once

#include "base/dtype.hpp"
#include "base/scalar.hpp"
#include "kernels/functors.hpp"
#include "kernels/loop.hpp"

namespace actorch::kernels::cuda {

/// out = op(in). loop: out (t), in (t).
void unary(unary_op op, dtype t, const strided_loop<2>& loop, const scalar* lo = nullptr,
           const scalar* hi = nullptr);
/// out = a op b. loop: out (t, or bool for comparisons), a (t), b (t).
void binary(binary_op op, dtype t, const strided_loop<3>& loop, const scalar& alpha);
/// out = cond ? a : b. loop: out (t), cond (bool), a (t), b (t).
void where(dtype t, const strided_loop<4>& loop);
/// self = mask ? value : self. loop: self (t), mask (bool).
void masked_fill(dtype t, const strided_loop<2>& loop, const scalar& value);

} // namespace actorch::kernels::cuda
