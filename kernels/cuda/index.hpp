// Indexing kernels on a CUDA device: the twins of kernels/cpu/index.hpp, same layouts and
// contracts. check_index_range scans the indices on the device and reads back only the first
// bad one (one synchronisation), so its error is the CPU's, word for word. scatter_add
// accumulates with atomics: float sums may differ from the CPU's in the last bits, and between
// runs, as PyTorch's CUDA scatter_add does.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/cpu/index.hpp"

namespace actorch::kernels::cuda {

using cpu::strided_view;

void check_index_range(const char* op, const int64_t* index, int64_t n, int64_t dim, int64_t size);
void index_select(int64_t esize, const void* in, void* out, int64_t outer, int64_t in_size,
                  int64_t inner, const int64_t* index, int64_t n);
void gather(int64_t esize, const void* in, const strided_view& in_strides, void* out,
            const int64_t* index, const strided_view& shape, int64_t dim);
/// As the CPU's, for float16, bfloat16, float32, float64, int32 and int64 (the dtypes with
/// hardware atomics); others throw.
void scatter_add(dtype t, void* out, const strided_view& out_view, const void* src,
                 const strided_view& src_strides, const int64_t* index, const strided_view& shape,
                 int64_t dim);

} // namespace actorch::kernels::cuda
