// index_select, gather and scatter_add over raw pointers. gather and scatter_add walk every
// position of the (contiguous) index tensor row by row, keeping the offset of the other
// operands at the current row in an odometer; the indexed dim's offset comes from the index.
#include "kernels/cpu/index.hpp"

#include <cstring>

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

// Calls row(pos, base, n) for each innermost row of `shape` (pos: the row-major position of
// the row's first element; base[k]: operand k's offset there, from st[k], in elements).
template <int K, class Row>
void for_each_index_row(const strided_view& shape, const int64_t (&st)[K][kMaxDims], Row&& row) {
  int64_t base[K] = {};
  if (shape.ndim == 0) {
    row(int64_t(0), base, int64_t(1));
    return;
  }
  const int last = shape.ndim - 1;
  int64_t total = 1;
  for (int d = 0; d < shape.ndim; ++d)
    total *= shape.sizes[d];
  const int64_t n = shape.sizes[last];
  if (total == 0)
    return;
  int64_t counter[kMaxDims] = {};
  for (int64_t pos = 0; pos < total; pos += n) {
    row(pos, base, n);
    for (int d = last - 1; d >= 0; --d) {
      if (++counter[d] < shape.sizes[d]) {
        for (int k = 0; k < K; ++k)
          base[k] += st[k][d];
        break;
      }
      for (int k = 0; k < K; ++k)
        base[k] -= st[k][d] * (shape.sizes[d] - 1);
      counter[d] = 0;
    }
  }
}

// Moves one element of S bytes (memcpy of a constant size compiles to a plain load/store).
template <size_t S> inline void move_elem(char* dst, const char* src) {
  std::memcpy(dst, src, S);
}

template <size_t S>
void gather_sized(const char* in, const strided_view& in_st, char* out, const int64_t* index,
                  const strided_view& shape, int64_t dim) {
  int64_t st[1][kMaxDims] = {};
  for (int d = 0; d < shape.ndim; ++d)
    st[0][d] = d == dim ? 0 : in_st.strides[d]; // the index supplies dim's offset
  const int last = shape.ndim - 1;
  const int64_t dim_stride = shape.ndim ? in_st.strides[dim] : 0;
  const int64_t last_stride = last == dim || shape.ndim == 0 ? 0 : in_st.strides[last];
  for_each_index_row(shape, st, [&](int64_t pos, const int64_t* base, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = base[0] + i * last_stride + index[pos + i] * dim_stride;
      move_elem<S>(out + (pos + i) * int64_t(S), in + src * int64_t(S));
    }
  });
}

template <class T>
void scatter_add_typed(T* out, const strided_view& out_view, const T* src,
                       const strided_view& src_st, const int64_t* index, const strided_view& shape,
                       int64_t dim) {
  using C = compute_t<T>;
  int64_t st[2][kMaxDims] = {};
  for (int d = 0; d < shape.ndim; ++d) {
    st[0][d] = d == dim ? 0 : out_view.strides[d]; // the index supplies dim's offset
    st[1][d] = src_st.strides[d];
  }
  const int last = shape.ndim - 1;
  const int64_t dim_stride = shape.ndim ? out_view.strides[dim] : 0;
  const int64_t out_last = last == dim || shape.ndim == 0 ? 0 : out_view.strides[last];
  const int64_t src_last = shape.ndim == 0 ? 0 : src_st.strides[last];
  for_each_index_row(shape, st, [&](int64_t pos, const int64_t* base, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      T& o = out[base[0] + i * out_last + index[pos + i] * dim_stride];
      o = static_cast<T>(static_cast<C>(o) + static_cast<C>(src[base[1] + i * src_last]));
    }
  });
}

} // namespace

void check_index_range(const char* op, const int64_t* index, int64_t n, int64_t dim, int64_t size) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index[i];
    ACTORCH_CHECK(v >= 0 && v<size, op, ": index ", v, " is out of bounds for dim ", dim,
                              " with size ", size, size> 0
                      ? detail::concat(" (expected an index in [0, ", size - 1, "])")
                      : std::string(" (the dim is empty: no index is valid)"));
  }
}

void index_select(int64_t esize, const void* in, void* out, int64_t outer, int64_t in_size,
                  int64_t inner, const int64_t* index, int64_t n) {
  const size_t row = size_t(inner * esize);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(dst + (o * n + j) * int64_t(row), src + (o * in_size + index[j]) * int64_t(row),
                  row);
}

void gather(int64_t esize, const void* in, const strided_view& in_strides, void* out,
            const int64_t* index, const strided_view& shape, int64_t dim) {
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  switch (esize) {
  case 1: gather_sized<1>(src, in_strides, dst, index, shape, dim); return;
  case 2: gather_sized<2>(src, in_strides, dst, index, shape, dim); return;
  case 4: gather_sized<4>(src, in_strides, dst, index, shape, dim); return;
  case 8: gather_sized<8>(src, in_strides, dst, index, shape, dim); return;
  default: break;
  }
  ACTORCH_FAIL("gather kernel: unsupported element size ", esize);
}

void scatter_add(dtype t, void* out, const strided_view& out_view, const void* src,
                 const strided_view& src_strides, const int64_t* index, const strided_view& shape,
                 int64_t dim) {
  dispatch(t, [&]<class T>() {
    scatter_add_typed<T>(static_cast<T*>(out), out_view, static_cast<const T*>(src), src_strides,
                         index, shape, dim);
  });
}

} // namespace actorch::kernels::cpu
