// The strided iteration every elementwise kernel shares. An op over N operands (operand 0 is
// the output) is described by one broadcast shape and per-operand byte strides (0 where an
// operand is broadcast). Rows of the innermost dim go to an `inner` callback, which kernels
// specialise for the contiguous and scalar-broadcast cases so the compiler vectorises them.
// CUDA kernels visit the same elements by linear index instead (element_pointers), in the same
// order; the CPU tests check that the two agree.
#pragma once

#include <cstdint>

#include "base/host_device.hpp"

namespace actorch::kernels {

inline constexpr int kMaxDims = 16;

template <int N> struct strided_loop {
  int ndim = 0;                   // dims after coalescing, innermost last
  int64_t sizes[kMaxDims]{};      // shared by all operands
  int64_t strides[N][kMaxDims]{}; // in bytes, per operand
  char* data[N]{};

  ACTORCH_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d)
      n *= sizes[d];
    return n;
  }
};

/// Calls inner(ptrs, inner_strides, n) once for every innermost row of the loop.
template <int N, class Inner> void for_each_row(const strided_loop<N>& loop, Inner&& inner) {
  char* ptrs[N];
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) {
    ptrs[k] = loop.data[k];
    inner_strides[k] = 0;
  }
  if (loop.ndim == 0) {
    inner(ptrs, inner_strides, int64_t(1));
    return;
  }
  const int last = loop.ndim - 1;
  const int64_t n = loop.sizes[last];
  int64_t outer = 1;
  for (int d = 0; d < last; ++d)
    outer *= loop.sizes[d];
  if (n == 0 || outer == 0)
    return;
  for (int k = 0; k < N; ++k)
    inner_strides[k] = loop.strides[k][last];

  int64_t counter[kMaxDims] = {};
  for (int64_t row = 0; row < outer; ++row) {
    inner(ptrs, inner_strides, n);
    // Advance the odometer over the outer dims, innermost first.
    for (int d = last - 1; d >= 0; --d) {
      if (++counter[d] < loop.sizes[d]) {
        for (int k = 0; k < N; ++k)
          ptrs[k] += loop.strides[k][d];
        break;
      }
      for (int k = 0; k < N; ++k)
        ptrs[k] -= loop.strides[k][d] * (loop.sizes[d] - 1);
      counter[d] = 0;
    }
  }
}

/// The operands' element pointers of the `linear`-th element in for_each_row's order (row-major
/// over the loop's sizes): what a CUDA thread computes for its element.
/// @pre 0 <= linear < loop.numel()
template <int N>
ACTORCH_HOST_DEVICE inline void element_pointers(const strided_loop<N>& loop, int64_t linear,
                                                 char* (&ptrs)[N]) {
  for (int k = 0; k < N; ++k)
    ptrs[k] = loop.data[k];
  if (loop.ndim == 0)
    return;
  // The outermost dim's index is what is left: no division for it, so a contiguous loop (one
  // dim after coalescing) costs none.
  for (int d = loop.ndim - 1; d > 0; --d) {
    const int64_t size = loop.sizes[d];
    const int64_t i = linear % size;
    linear /= size;
    for (int k = 0; k < N; ++k)
      ptrs[k] += i * loop.strides[k][d];
  }
  for (int k = 0; k < N; ++k)
    ptrs[k] += linear * loop.strides[k][0];
}

} // namespace actorch::kernels
