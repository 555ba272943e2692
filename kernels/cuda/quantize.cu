// Quantization on a CUDA device, one thread per value.
#include "kernels/cuda/quantize.hpp"

#include "kernels/cuda/launch.cuh"
#include "kernels/functors.hpp"

namespace actorch::kernels::cuda {

namespace {

template <class T>
__global__ void quantize_kernel(const float* in, T* out, int64_t n, float inv_scale, double zp) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = quantize_value<T>(in[i], inv_scale, zp);
}

template <class T>
__global__ void dequantize_kernel(const T* q, float* out, int64_t n, double scale, double zp) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = dequantize_value(q[i], scale, zp);
}

// Calls fn.template operator()<T>() for the quantized storage dtypes.
template <class Fn> void with_storage(dtype t, const char* op, Fn&& fn) {
  switch (t) {
  case dtype::int8: fn.template operator()<int8_t>(); return;
  case dtype::uint8: fn.template operator()<uint8_t>(); return;
  case dtype::int32: fn.template operator()<int32_t>(); return;
  default: break;
  }
  ACTORCH_FAIL(op, " kernel: no quantized storage of dtype ", dtype_name(t));
}

} // namespace

void quantize_per_tensor(dtype t, const float* in, void* out, int64_t n, float inv_scale,
                         int64_t zero_point) {
  if (n == 0)
    return;
  with_storage(t, "quantize_per_tensor", [&]<class T>() {
    quantize_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(in, static_cast<T*>(out), n,
                                                                 inv_scale, double(zero_point));
    check_launch("quantize_per_tensor");
  });
}

void dequantize_per_tensor(dtype t, const void* q, float* out, int64_t n, double scale,
                           int64_t zero_point) {
  if (n == 0)
    return;
  with_storage(t, "dequantize_per_tensor", [&]<class T>() {
    dequantize_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<const T*>(q), out, n,
                                                                   scale, double(zero_point));
    check_launch("dequantize_per_tensor");
  });
}

} // namespace actorch::kernels::cuda
