// index_select, gather and scatter_add on a CUDA device, one thread per output (or index)
// element; each thread turns its row-major position into the operands' offsets.
#include "kernels/cuda/index.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/launch.cuh"

namespace actorch::kernels::cuda {

namespace {

// The smallest position whose index lies outside [0, size); left at its initial all-ones when
// none does.
__global__ void first_bad_kernel(const int64_t* index, int64_t n, int64_t size,
                                 unsigned long long* first) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    if (index[i] < 0 || index[i] >= size)
      atomicMin(first, static_cast<unsigned long long>(i));
}

// An element of S bytes.
template <size_t S> struct alignas(S) bytes { unsigned char b[S]; };

template <size_t S>
__global__ void index_select_kernel(const bytes<S>* in, bytes<S>* out, int64_t outer,
                                    int64_t in_size, int64_t inner, const int64_t* index,
                                    int64_t n) {
  const int64_t total = outer * n * inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t i = e % inner, j = (e / inner) % n, o = e / (inner * n);
    out[e] = in[(o * in_size + index[j]) * inner + i];
  }
}

// The offset, in elements, of position p (row-major over shape) in a view with `strides`,
// with dim's coordinate replaced by `at` (dim < 0: none replaced).
__device__ int64_t offset_of(int64_t p, const strided_view& shape, const int64_t* strides,
                             int64_t dim, int64_t at) {
  int64_t off = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    const int64_t c = p % shape.sizes[d];
    p /= shape.sizes[d];
    off += (d == dim ? at : c) * strides[d];
  }
  return off;
}

template <size_t S>
__global__ void gather_kernel(const bytes<S>* in, strided_view in_view, bytes<S>* out,
                              const int64_t* index, strided_view shape, int64_t dim,
                              int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step)
    out[p] = in[offset_of(p, shape, in_view.strides, dim, index[p])];
}

template <class T> __device__ void atomic_add(T* at, T v) {
  if constexpr (std::is_same_v<T, half>)
    atomicAdd(reinterpret_cast<__half*>(at), __float2half_rn(float(v)));
  else if constexpr (std::is_same_v<T, bfloat16>)
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(at), __float2bfloat16_rn(float(v)));
  else if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(v));
  else
    atomicAdd(at, v);
}

template <class T>
__global__ void scatter_add_kernel(T* out, strided_view out_view, const T* src,
                                   strided_view src_view, const int64_t* index, strided_view shape,
                                   int64_t dim, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step)
    atomic_add(out + offset_of(p, shape, out_view.strides, dim, index[p]),
               src[offset_of(p, shape, src_view.strides, -1, 0)]);
}

int64_t numel_of(const strided_view& shape) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; ++d)
    n *= shape.sizes[d];
  return n;
}

// Calls fn.template operator()<S>() for an element size of 1, 2, 4 or 8 bytes.
template <class Fn> void with_size(int64_t esize, const char* op, Fn&& fn) {
  switch (esize) {
  case 1: fn.template operator()<1>(); return;
  case 2: fn.template operator()<2>(); return;
  case 4: fn.template operator()<4>(); return;
  case 8: fn.template operator()<8>(); return;
  default: break;
  }
  ACTORCH_FAIL(op, " kernel: unsupported element size ", esize);
}

} // namespace

void check_index_range(const char* op, const int64_t* index, int64_t n, int64_t dim, int64_t size) {
  if (n == 0)
    return;
  const cudaStream_t on = stream();
  unsigned long long* first = nullptr;
  ACTORCH_CUDA_CHECK(cudaMallocAsync(&first, sizeof(*first), on));
  struct freed { // also when a check below throws
    unsigned long long* p;
    cudaStream_t s;
    ~freed() { (void)cudaFreeAsync(p, s); }
  } guard{first, on};
  // All ones: above every position. A memset, not a copy from host memory, which would
  // block on this hot path (every gather of a training step).
  ACTORCH_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof(*first), on));
  const unsigned long long none = ~0ull;
  first_bad_kernel<<<blocks_for(n), kThreads, 0, on>>>(index, n, size, first);
  check_launch("check_index_range");
  unsigned long long found = none;
  ACTORCH_CUDA_CHECK(cudaMemcpyAsync(&found, first, sizeof(found), cudaMemcpyDeviceToHost, on));
  ACTORCH_CUDA_CHECK(cudaStreamSynchronize(on));
  if (found == none)
    return;
  int64_t bad = 0;
  ACTORCH_CUDA_CHECK(cudaMemcpyAsync(&bad, index + found, sizeof(bad), cudaMemcpyDeviceToHost, on));
  ACTORCH_CUDA_CHECK(cudaStreamSynchronize(on));
  cpu::check_index_range(op, &bad, 1, dim, size); // throws the CPU's message
}

void index_select(int64_t esize, const void* in, void* out, int64_t outer, int64_t in_size,
                  int64_t inner, const int64_t* index, int64_t n) {
  const int64_t total = outer * n * inner;
  if (total == 0)
    return;
  with_size(esize, "index_select", [&]<size_t S>() {
    index_select_kernel<S><<<blocks_for(total), kThreads, 0, stream()>>>(
        static_cast<const bytes<S>*>(in), static_cast<bytes<S>*>(out), outer, in_size, inner, index,
        n);
    check_launch("index_select");
  });
}

void gather(int64_t esize, const void* in, const strided_view& in_strides, void* out,
            const int64_t* index, const strided_view& shape, int64_t dim) {
  const int64_t total = numel_of(shape);
  if (total == 0)
    return;
  with_size(esize, "gather", [&]<size_t S>() {
    gather_kernel<S><<<blocks_for(total), kThreads, 0, stream()>>>(
        static_cast<const bytes<S>*>(in), in_strides, static_cast<bytes<S>*>(out), index, shape,
        dim, total);
    check_launch("gather");
  });
}

void scatter_add(dtype t, void* out, const strided_view& out_view, const void* src,
                 const strided_view& src_strides, const int64_t* index, const strided_view& shape,
                 int64_t dim) {
  const int64_t total = numel_of(shape);
  dispatch(t, [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, half> || std::is_same_v<T, bfloat16> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      if (total == 0)
        return;
      scatter_add_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(
          static_cast<T*>(out), out_view, static_cast<const T*>(src), src_strides, index, shape,
          dim, total);
      check_launch("scatter_add");
    } else {
      ACTORCH_FAIL("scatter_add: CUDA tensors of dtype ", dtype_name(t),
                   " are not supported (float16, bfloat16, float32, float64, int32, int64 are)");
    }
  });
}

} // namespace actorch::kernels::cuda
