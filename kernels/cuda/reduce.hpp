// Reduction CUDA kernels: the twins of kernels/cpu/reduce.hpp over the same (K, R) rows and
// (R, K) columns layouts, with the same contracts and output dtypes (cpu::reduce_out_dtype).
// Floats accumulate in double, integers in int64, as on the CPU; the order of the additions
// differs (a tree per row), so float sums agree with the CPU's to rounding, not bit for bit.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/cpu/reduce.hpp"

namespace actorch::kernels::cuda {

using cpu::reduce_op;

void reduce_rows(reduce_op op, dtype t, const void* in, void* out, int64_t K, int64_t R,
                 int64_t correction = 0);
void reduce_cols(reduce_op op, dtype t, const void* in, void* out, int64_t R, int64_t K,
                 int64_t correction = 0);
void arg_reduce_rows(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t K, int64_t R);
void arg_reduce_cols(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t R, int64_t K);

} // namespace actorch::kernels::cuda
