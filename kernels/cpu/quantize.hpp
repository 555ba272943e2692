// Per-tensor affine quantization loops: float32 -> int8/uint8/int32 and back, over contiguous
// buffers (core/ops/quantize checks the arguments and lays the tensors out).
#pragma once

#include <cstdint>

#include "base/dtype.hpp"

namespace actorch::kernels::cpu {

/// out[i] = clamp(nearbyint(in[i] * inv_scale) + zero_point, qmin, qmax), PyTorch's
/// quantize_val: the product in float, round half to even, then saturation to the range of
/// `t` (int8, uint8 or int32). +-inf saturate; NaN gives qmin (what PyTorch gives on x86).
/// in is (n) float32, out is (n) of dtype t.
void quantize_per_tensor(dtype t, const float* in, void* out, int64_t n, float inv_scale,
                         int64_t zero_point);

/// out[i] = float((double(q[i]) - zero_point) * scale). q is (n) of dtype t, out (n) float32.
void dequantize_per_tensor(dtype t, const void* q, float* out, int64_t n, double scale,
                           int64_t zero_point);

} // namespace actorch::kernels::cpu
