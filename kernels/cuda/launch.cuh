// What every .cu file of kernels/cuda/ uses: the check of launches (throwing actorch::error,
// never exiting), the stream kernels launch on, and the grid-stride launch of an elementwise
// functor over a strided loop.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/error.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/loop.hpp"

namespace actorch::kernels::cuda {

/// The stream this thread's kernels launch on.
inline cudaStream_t stream() {
  return static_cast<cudaStream_t>(current_stream(current_device()));
}

/// After every launch: throws naming `kernel` when the launch failed (a bad configuration, no
/// device); errors of the kernel's run surface at the next synchronising call.
inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  ACTORCH_CHECK(err == cudaSuccess, "CUDA kernel ", kernel,
                " failed to launch: ", cudaGetErrorString(err));
}

inline constexpr int kThreads = 256;

/// Blocks for `n` elements at kThreads per block, capped: the kernels loop over the rest.
inline unsigned blocks_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

/// Blocks for kernels that give each of `rows` rows a block, capped: they loop over the rest.
inline unsigned block_per_row(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, 65535));
}

/// Grid-stride loop: op(ptrs) for every element, ptrs being the operands' element pointers.
template <int N, class Op>
__global__ void elementwise_kernel(strided_loop<N> loop, int64_t n, Op op) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    char* ptrs[N];
    element_pointers(loop, i, ptrs);
    op(ptrs);
  }
}

/// The block's threads combine their values; every thread gets the result.
/// @pre blockDim.x == kThreads
template <class A, class Combine> __device__ A block_reduce(A v, Combine combine) {
  __shared__ alignas(16) unsigned char buffer[kThreads * sizeof(A)];
  A* s = reinterpret_cast<A*>(buffer);
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      s[threadIdx.x] = combine(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  const A r = s[0];
  __syncthreads(); // s is reused by the next row
  return r;
}

/// Launches elementwise_kernel over every element of `loop` on the current stream.
template <int N, class Op>
void launch_elementwise(const strided_loop<N>& loop, Op op, const char* name) {
  const int64_t n = loop.numel();
  if (n == 0)
    return;
  elementwise_kernel<N, Op><<<blocks_for(n), kThreads, 0, stream()>>>(loop, n, op);
  check_launch(name);
}

} // namespace actorch::kernels::cuda
