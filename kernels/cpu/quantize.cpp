// Per-tensor affine quantization loops over kernels::quantize_value (shared with the CUDA twin).
// Rounding is std::nearbyint under the default rounding mode (round half to even), as
// PyTorch's quantize_val and FBGEMM's Quantize. PyTorch adds the
// zero point and clamps in int64 after a float -> int64 cast, which is undefined for values
// beyond int64 (inf, 1e30); here the sum is clamped in double first, so such values saturate.
#include "kernels/cpu/quantize.hpp"

#include "base/error.hpp"
#include "kernels/functors.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class T>
void quantize_loop(const float* in, T* out, int64_t n, float inv_scale, int64_t zero_point) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = quantize_value<T>(in[i], inv_scale, double(zero_point));
}

template <class T>
void dequantize_loop(const T* q, float* out, int64_t n, double scale, int64_t zero_point) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = dequantize_value(q[i], scale, double(zero_point));
}

} // namespace

void quantize_per_tensor(dtype t, const float* in, void* out, int64_t n, float inv_scale,
                         int64_t zero_point) {
  switch (t) {
  case dtype::int8: return quantize_loop(in, static_cast<int8_t*>(out), n, inv_scale, zero_point);
  case dtype::uint8: return quantize_loop(in, static_cast<uint8_t*>(out), n, inv_scale, zero_point);
  case dtype::int32: return quantize_loop(in, static_cast<int32_t*>(out), n, inv_scale, zero_point);
  default: break;
  }
  ACTORCH_INTERNAL_ASSERT(false, "quantize_per_tensor kernel: no quantized storage of dtype ",
                          dtype_name(t));
}

void dequantize_per_tensor(dtype t, const void* q, float* out, int64_t n, double scale,
                           int64_t zero_point) {
  switch (t) {
  case dtype::int8:
    return dequantize_loop(static_cast<const int8_t*>(q), out, n, scale, zero_point);
  case dtype::uint8:
    return dequantize_loop(static_cast<const uint8_t*>(q), out, n, scale, zero_point);
  case dtype::int32:
    return dequantize_loop(static_cast<const int32_t*>(q), out, n, scale, zero_point);
  default: break;
  }
  ACTORCH_INTERNAL_ASSERT(false, "dequantize_per_tensor kernel: no quantized storage of dtype ",
                          dtype_name(t));
}

} // namespace actorch::kernels::cpu
