// Per-tensor affine quantization loops. Rounding is std::nearbyint under the default rounding
// mode (round half to even), as PyTorch's quantize_val and FBGEMM's Quantize. PyTorch adds the
// zero point and clamps in int64 after a float -> int64 cast, which is undefined for values
// beyond int64 (inf, 1e30); here the sum is clamped in double first, so such values saturate.
#include "kernels/cpu/quantize.hpp"

#include <cmath>
#include <limits>

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class T>
void quantize_loop(const float* in, T* out, int64_t n, float inv_scale, int64_t zero_point) {
  constexpr double qmin = double(std::numeric_limits<T>::min());
  constexpr double qmax = double(std::numeric_limits<T>::max());
  const double zp = double(zero_point);
  for (int64_t i = 0; i < n; ++i) {
    // The product in float (as PyTorch), the sum in double (exact for every int32 + round).
    const double v = double(std::nearbyint(in[i] * inv_scale)) + zp;
    out[i] = std::isnan(v) ? T(qmin) : T(v < qmin ? qmin : v > qmax ? qmax : v);
  }
}

template <class T>
void dequantize_loop(const T* q, float* out, int64_t n, double scale, int64_t zero_point) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = float((double(q[i]) - double(zero_point)) * scale);
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
