// Strided copies with dtype conversion and fills on a CUDA device: the twins of
// kernels/cpu/copy.hpp (same conversions, kernels::convert). Both operands are device memory
// of the current device; copies between host and device are core/cuda/copy.cpp's.
#pragma once

#include "base/dtype.hpp"
#include "base/scalar.hpp"
#include "kernels/loop.hpp"

namespace actorch::kernels::cuda {

/// out (operand 0, dtype dst) = in (operand 1, dtype src), converting element by element.
void copy(dtype dst, dtype src, const strided_loop<2>& loop);
/// Every element of operand 0 (dtype t) = value.
void fill(dtype t, const strided_loop<1>& loop, const scalar& value);

} // namespace actorch::kernels::cuda
