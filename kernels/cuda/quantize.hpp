// Per-tensor affine quantization on a CUDA device: the twins of kernels/cpu/quantize.hpp, with
// the same per-value arithmetic (kernels::quantize_value / dequantize_value).
#pragma once

#include <cstdint>

#include "base/dtype.hpp"

namespace actorch::kernels::cuda {

void quantize_per_tensor(dtype t, const float* in, void* out, int64_t n, float inv_scale,
                         int64_t zero_point);
void dequantize_per_tensor(dtype t, const void* q, float* out, int64_t n, double scale,
                           int64_t zero_point);

} // namespace actorch::kernels::cuda
