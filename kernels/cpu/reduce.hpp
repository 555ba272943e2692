// Reduction CPU kernels (sum, mean, amax/amin, var, any/all, and max/min with indices) over
// two dense layouts that core/ops/reduce arranges: (K, R) rows, where each output reduces one
// contiguous row, and (R, K) columns, where each output reduces a column (the bias-gradient
// shape). Both inner loops run over contiguous memory so the compiler vectorises them.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"

namespace actorch::kernels::cpu {

enum class reduce_op { sum, mean, amax, amin, var, std, any, all };

/// The dtype reduce_rows / reduce_cols write for `op` over input dtype `t`: int64 for sum of
/// integers and bool, bool for any/all, `t` otherwise.
dtype reduce_out_dtype(reduce_op op, dtype t);

/// in is (K, R) contiguous, dtype t; out is (K), dtype reduce_out_dtype(op, t).
/// Floats accumulate in double (acc_t). mean, var and std need a floating t. var divides the
/// sum of squared deviations by max(0, R - correction), so R <= correction gives nan; std is
/// its square root. amax / amin propagate NaN. @pre R > 0 for amax / amin.
void reduce_rows(reduce_op op, dtype t, const void* in, void* out, int64_t K, int64_t R,
                 int64_t correction = 0);

/// in is (R, K) contiguous, dtype t; out is (K): out[j] reduces in[0..R)[j]. Same contract as
/// reduce_rows.
void reduce_cols(reduce_op op, dtype t, const void* in, void* out, int64_t R, int64_t K,
                 int64_t correction = 0);

/// max (is_max) or min with the index of its first occurrence; a NaN counts as the extreme
/// and its first index is reported. in is (K, R) contiguous, dtype t; values is (K), dtype t,
/// and indices is (K), int64; either may be null. @pre R > 0.
void arg_reduce_rows(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t K, int64_t R);

/// As arg_reduce_rows over (R, K) contiguous input: each output reduces a column.
void arg_reduce_cols(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t R, int64_t K);

} // namespace actorch::kernels::cpu
