// Reductions with PyTorch's semantics: sum, mean, amax/amin, max/min (with indices), argmax/
// argmin, var, std, any, all. Dims may be negative and come as a list (an empty list reduces
// every dim); keepdim leaves reduced dims as size 1. The loops are in kernels/cpu/reduce.
#pragma once

#include "core/tensor.hpp"

namespace actorch {

/// Sum of all elements, or over `dims`. Integer and bool inputs give int64, floats keep their
/// dtype (accumulating in double). An empty reduction gives 0.
tensor sum(const tensor& t);
tensor sum(const tensor& t, const shape_t& dims, bool keepdim = false);

/// Arithmetic mean. @pre t is floating point (integer inputs throw, as in PyTorch). An empty
/// reduction gives nan.
tensor mean(const tensor& t);
tensor mean(const tensor& t, const shape_t& dims, bool keepdim = false);

/// Largest / smallest value over all elements; NaN propagates. Throws for an empty tensor.
tensor max(const tensor& t);
tensor min(const tensor& t);
/// Values and int64 indices (first occurrence; the first NaN where there is one) along `dim`.
/// Throws when dim has size 0.
values_indices max(const tensor& t, int64_t dim, bool keepdim = false);
values_indices min(const tensor& t, int64_t dim, bool keepdim = false);

/// torch.amax / torch.amin: max / min values over `dims` (empty: all), without indices.
/// Throws when a reduced dim has size 0.
tensor amax(const tensor& t, const shape_t& dims = {}, bool keepdim = false);
tensor amin(const tensor& t, const shape_t& dims = {}, bool keepdim = false);

/// int64 index of the first max / min, into the flattened tensor or along `dim`.
tensor argmax(const tensor& t);
tensor argmax(const tensor& t, int64_t dim, bool keepdim = false);
tensor argmin(const tensor& t);
tensor argmin(const tensor& t, int64_t dim, bool keepdim = false);

/// Variance with Bessel's correction when `unbiased` (divides by N - 1, else by N); a divisor
/// of 0 gives nan. @pre t is floating point.
tensor var(const tensor& t, bool unbiased = true);
tensor var(const tensor& t, const shape_t& dims, bool unbiased = true, bool keepdim = false);
/// var(t, {1}): a braced list would otherwise convert to bool and pick var(t, unbiased).
tensor var(const tensor& t, std::initializer_list<int64_t> dims, bool unbiased = true,
           bool keepdim = false);
/// Standard deviation: sqrt(var).
tensor std(const tensor& t, bool unbiased = true);
tensor std(const tensor& t, const shape_t& dims, bool unbiased = true, bool keepdim = false);
tensor std(const tensor& t, std::initializer_list<int64_t> dims, bool unbiased = true,
           bool keepdim = false);

/// Whether any / all elements are nonzero (NaN counts as nonzero); bool results. An empty
/// reduction gives false for any and true for all.
tensor any(const tensor& t);
tensor any(const tensor& t, const shape_t& dims, bool keepdim = false);
tensor all(const tensor& t);
tensor all(const tensor& t, const shape_t& dims, bool keepdim = false);

} // namespace actorch
