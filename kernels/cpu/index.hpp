// Indexing kernels along one dim: index_select, gather and scatter_add (gather's backward),
// plus the bounds check every one of them runs on its indices first. index_select and gather
// move raw elements, so they take an element size instead of a dtype.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/loop.hpp"

namespace actorch::kernels::cpu {

/// Throws naming `op`, the first index outside [0, size) and the valid range ("index 5 is out
/// of bounds for dim 1 with size 3"). Negative indices are rejected too.
void check_index_range(const char* op, const int64_t* index, int64_t n, int64_t dim, int64_t size);

/// in is (outer, in_size, inner) and out is (outer, n, inner), both contiguous, elements of
/// `esize` bytes; out[o, j, i] = in[o, index[j], i]. @pre index values in [0, in_size).
void index_select(int64_t esize, const void* in, void* out, int64_t outer, int64_t in_size,
                  int64_t inner, const int64_t* index, int64_t n);

/// A strided view without a tensor: `ndim` sizes and strides (in elements).
struct strided_view {
  int ndim = 0;
  int64_t sizes[kMaxDims]{};
  int64_t strides[kMaxDims]{};
};

/// index and out are contiguous with index's sizes (`shape`); in has `in_strides` (elements,
/// ndim == shape.ndim). out[p] = in[p with dim replaced by index[p]]. @pre index values are in
/// range and shape.sizes[d] <= in's size for d != dim.
void gather(int64_t esize, const void* in, const strided_view& in_strides, void* out,
            const int64_t* index, const strided_view& shape, int64_t dim);

/// out[p with dim replaced by index[p]] += src[p] for every position p of index (contiguous,
/// sizes in `shape`); out is contiguous with `out_view`'s sizes and strides, src has
/// `src_strides`; all of dtype t. Repeated indices accumulate.
/// @pre index values are in range; shape fits inside out (d != dim) and src (every d).
void scatter_add(dtype t, void* out, const strided_view& out_view, const void* src,
                 const strided_view& src_strides, const int64_t* index, const strided_view& shape,
                 int64_t dim);

} // namespace actorch::kernels::cpu
