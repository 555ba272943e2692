// Indexing along one dim with PyTorch's semantics: index_select, gather, and scatter_add (the
// backward of gather). Indices are checked against the dim's size before any element moves;
// the loops are in kernels/cpu/index.
#pragma once

#include "core/tensor.hpp"

namespace actorch {

/// The slices of t at `index` along dim: out.size(dim) == index.numel(), other dims as t.
/// @pre index is 0-D or 1-D, int64 or int32, with values in [0, t.size(dim)) (negative
/// indices are rejected, as in PyTorch).
tensor index_select(const tensor& t, int64_t dim, const tensor& index);

/// out[i][j][k] = t[index[i][j][k]][j][k] for dim 0 (and likewise for the other dims); out has
/// index's shape. @pre index is int64 with t's number of dims, index.size(d) <= t.size(d) for
/// d != dim, and values in [0, t.size(dim)).
tensor gather(const tensor& t, int64_t dim, const tensor& index);

/// A copy of t with src[i][j][k] added at [index[i][j][k]][j][k] for dim 0 (likewise for the
/// other dims); repeated indices accumulate. gather's backward: scatter_add(zeros, dim, index,
/// grad). @pre index is int64; t, index and src have the same number of dims;
/// index.size(d) <= src.size(d) for every d and <= t.size(d) for d != dim; src has t's dtype.
tensor scatter_add(const tensor& t, int64_t dim, const tensor& index, const tensor& src);

namespace detail {
/// gather and scatter_add, whose index range check (a synchronisation on a GPU) is skipped when
/// `check_range` is false: for backward formulas, whose index is their forward's, checked then.
tensor gather(const tensor& t, int64_t dim, const tensor& index, bool check_range);
tensor scatter_add(const tensor& t, int64_t dim, const tensor& index, const tensor& src,
                   bool check_range);
} // namespace detail

} // namespace actorch
