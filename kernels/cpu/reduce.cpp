// Reduction CPU kernels. Floats accumulate in double and integers in int64 (acc_t); integer sums
// wrap around on overflow, computed in uint64 where C++ defines wrapping. Row sums keep eight
// partial sums so the loop vectorises without reassociating one long chain (which also
// halves the rounding error's growth); column reductions keep one accumulator per output.
#include "kernels/cpu/reduce.hpp"

#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/error.hpp"
#include "kernels/functors.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class T> using C = compute_t<T>;

// Sums of one contiguous row. -----------------------------------------------------------------

template <class T> acc_t<T> sum_row(const T* x, int64_t n) {
  if constexpr (is_floating_v<T>) {
    constexpr int64_t lanes = 8;
    double part[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
      for (int64_t j = 0; j < lanes; ++j)
        part[j] += double(C<T>(x[i + j]));
    for (; i < n; ++i)
      part[0] += double(C<T>(x[i]));
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
  } else {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i)
      s += uint64_t(int64_t(x[i]));
    return int64_t(s);
  }
}

// Sum of squared deviations from `mean` of one contiguous row.
template <class T> double m2_row(const T* x, int64_t n, double mean) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(C<T>(x[i])) - mean;
    s += d * d;
  }
  return s;
}

// max (IsMax) or min of two values where a NaN wins: once `m` is NaN it stays NaN, because
// neither v > NaN nor v != v (for a number v) holds.
template <bool IsMax, class V> inline V extreme(V m, V v) {
  if constexpr (IsMax)
    return (v > m || is_nan(v)) ? v : m;
  else
    return (v < m || is_nan(v)) ? v : m;
}

template <bool IsMax, class T> C<T> extreme_row(const T* x, int64_t n) {
  C<T> m = C<T>(x[0]);
  for (int64_t i = 1; i < n; ++i)
    m = extreme<IsMax>(m, C<T>(x[i]));
  return m;
}

// reduce_rows. ---------------------------------------------------------------------------------

template <class T>
void reduce_rows_typed(reduce_op op, const T* in, void* out_v, int64_t K, int64_t R,
                       int64_t correction) {
  switch (op) {
  case reduce_op::sum: {
    using O = std::conditional_t<is_floating_v<T>, T, int64_t>;
    O* out = static_cast<O*>(out_v);
    for (int64_t k = 0; k < K; ++k)
      out[k] = O(C<O>(sum_row(in + k * R, R)));
    return;
  }
  case reduce_op::mean:
  case reduce_op::var:
  case reduce_op::std:
    if constexpr (is_floating_v<T>) {
      T* out = static_cast<T*>(out_v);
      const double div = var_divisor(R, correction);
      for (int64_t k = 0; k < K; ++k) {
        const T* row = in + k * R;
        const double mean = sum_row(row, R) / double(R);
        double r = mean;
        if (op != reduce_op::mean) {
          r = m2_row(row, R, mean) / div;
          if (op == reduce_op::std)
            r = std::sqrt(r);
        }
        out[k] = T(C<T>(r));
      }
      return;
    }
    break;
  case reduce_op::amax:
  case reduce_op::amin: {
    T* out = static_cast<T*>(out_v);
    for (int64_t k = 0; k < K; ++k)
      out[k] = T(op == reduce_op::amax ? extreme_row<true>(in + k * R, R)
                                       : extreme_row<false>(in + k * R, R));
    return;
  }
  case reduce_op::any:
  case reduce_op::all: {
    bool* out = static_cast<bool*>(out_v);
    const bool want = op == reduce_op::any; // the value that decides the row early
    for (int64_t k = 0; k < K; ++k) {
      const T* row = in + k * R;
      bool r = !want;
      for (int64_t i = 0; i < R; ++i) {
        if ((C<T>(row[i]) != C<T>(0)) == want) {
          r = want;
          break;
        }
      }
      out[k] = r;
    }
    return;
  }
  }
  ACTORCH_FAIL("reduce kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

// reduce_cols. ---------------------------------------------------------------------------------

// acc[j] += in[i][j] over all rows i of the (R, K) input; A is double or uint64.
template <class A, class T> void sum_cols(const T* in, A* acc, int64_t R, int64_t K) {
  for (int64_t i = 0; i < R; ++i) {
    const T* row = in + i * K;
    for (int64_t j = 0; j < K; ++j) {
      if constexpr (std::is_floating_point_v<A>)
        acc[j] += A(C<T>(row[j]));
      else
        acc[j] += A(int64_t(row[j]));
    }
  }
}

template <class T>
void reduce_cols_typed(reduce_op op, const T* in, void* out_v, int64_t R, int64_t K,
                       int64_t correction) {
  switch (op) {
  case reduce_op::sum:
    if constexpr (is_floating_v<T>) {
      std::vector<double> acc(size_t(K), 0.0);
      sum_cols(in, acc.data(), R, K);
      T* out = static_cast<T*>(out_v);
      for (int64_t j = 0; j < K; ++j)
        out[j] = T(C<T>(acc[size_t(j)]));
    } else {
      std::vector<uint64_t> acc(size_t(K), 0);
      sum_cols(in, acc.data(), R, K);
      int64_t* out = static_cast<int64_t*>(out_v);
      for (int64_t j = 0; j < K; ++j)
        out[j] = int64_t(acc[size_t(j)]);
    }
    return;
  case reduce_op::mean:
  case reduce_op::var:
  case reduce_op::std:
    if constexpr (is_floating_v<T>) {
      std::vector<double> mean(size_t(K), 0.0);
      sum_cols(in, mean.data(), R, K);
      for (double& m : mean)
        m /= double(R);
      T* out = static_cast<T*>(out_v);
      if (op == reduce_op::mean) {
        for (int64_t j = 0; j < K; ++j)
          out[j] = T(C<T>(mean[size_t(j)]));
        return;
      }
      std::vector<double> m2(size_t(K), 0.0);
      for (int64_t i = 0; i < R; ++i) {
        const T* row = in + i * K;
        for (int64_t j = 0; j < K; ++j) {
          const double d = double(C<T>(row[j])) - mean[size_t(j)];
          m2[size_t(j)] += d * d;
        }
      }
      const double div = var_divisor(R, correction);
      for (int64_t j = 0; j < K; ++j) {
        const double v = m2[size_t(j)] / div;
        out[j] = T(C<T>(op == reduce_op::std ? std::sqrt(v) : v));
      }
      return;
    }
    break;
  case reduce_op::amax:
  case reduce_op::amin: {
    auto m = std::make_unique<C<T>[]>(size_t(K)); // not a vector: vector<bool> packs bits
    for (int64_t j = 0; j < K; ++j)
      m[size_t(j)] = C<T>(in[j]);
    for (int64_t i = 1; i < R; ++i) {
      const T* row = in + i * K;
      if (op == reduce_op::amax)
        for (int64_t j = 0; j < K; ++j)
          m[size_t(j)] = extreme<true>(m[size_t(j)], C<T>(row[j]));
      else
        for (int64_t j = 0; j < K; ++j)
          m[size_t(j)] = extreme<false>(m[size_t(j)], C<T>(row[j]));
    }
    T* out = static_cast<T*>(out_v);
    for (int64_t j = 0; j < K; ++j)
      out[j] = T(m[size_t(j)]);
    return;
  }
  case reduce_op::any:
  case reduce_op::all: {
    bool* out = static_cast<bool*>(out_v);
    const bool is_any = op == reduce_op::any;
    for (int64_t j = 0; j < K; ++j)
      out[j] = !is_any;
    for (int64_t i = 0; i < R; ++i) {
      const T* row = in + i * K;
      if (is_any)
        for (int64_t j = 0; j < K; ++j)
          out[j] = out[j] || (C<T>(row[j]) != C<T>(0));
      else
        for (int64_t j = 0; j < K; ++j)
          out[j] = out[j] && (C<T>(row[j]) != C<T>(0));
    }
    return;
  }
  }
  ACTORCH_FAIL("reduce kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

// max / min with indices. ----------------------------------------------------------------------

template <bool IsMax, class T>
void arg_rows_typed(const T* in, T* values, int64_t* indices, int64_t K, int64_t R) {
  for (int64_t k = 0; k < K; ++k) {
    const T* row = in + k * R;
    // The first extreme, as the CUDA kernel's tree finds it (better, kernels/functors.hpp).
    arg_pair<C<T>> best{C<T>(row[0]), 0};
    for (int64_t i = 1; i < R && !is_nan(best.value); ++i)
      best = better<IsMax>(best, {C<T>(row[i]), i});
    if (values)
      values[k] = T(best.value);
    if (indices)
      indices[k] = best.index;
  }
}

template <bool IsMax, class T>
void arg_cols_typed(const T* in, T* values, int64_t* indices, int64_t R, int64_t K) {
  std::vector<arg_pair<C<T>>> best(static_cast<size_t>(K));
  for (int64_t j = 0; j < K; ++j)
    best[size_t(j)] = {C<T>(in[j]), 0};
  for (int64_t i = 1; i < R; ++i) {
    const T* row = in + i * K;
    for (int64_t j = 0; j < K; ++j)
      best[size_t(j)] = better<IsMax>(best[size_t(j)], {C<T>(row[j]), i});
  }
  for (int64_t j = 0; j < K; ++j) {
    if (values)
      values[j] = T(best[size_t(j)].value);
    if (indices)
      indices[j] = best[size_t(j)].index;
  }
}

} // namespace

dtype reduce_out_dtype(reduce_op op, dtype t) {
  switch (op) {
  case reduce_op::sum: return is_floating_point(t) ? t : dtype::int64;
  case reduce_op::any:
  case reduce_op::all: return dtype::bool_;
  default: return t;
  }
}

void reduce_rows(reduce_op op, dtype t, const void* in, void* out, int64_t K, int64_t R,
                 int64_t correction) {
  ACTORCH_INTERNAL_ASSERT(R > 0 || (op != reduce_op::amax && op != reduce_op::amin),
                          "amax/amin over an empty row");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    reduce_rows_typed<T>(op, static_cast<const T*>(in), out, K, R, correction);
  });
}

void reduce_cols(reduce_op op, dtype t, const void* in, void* out, int64_t R, int64_t K,
                 int64_t correction) {
  ACTORCH_INTERNAL_ASSERT(R > 0 || (op != reduce_op::amax && op != reduce_op::amin),
                          "amax/amin over an empty column");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    reduce_cols_typed<T>(op, static_cast<const T*>(in), out, R, K, correction);
  });
}

void arg_reduce_rows(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t K, int64_t R) {
  ACTORCH_INTERNAL_ASSERT(R > 0, "arg reduction over an empty row");
  dispatch(t, [&]<class T>() {
    const T* x = static_cast<const T*>(in);
    T* v = static_cast<T*>(values);
    if (is_max)
      arg_rows_typed<true>(x, v, indices, K, R);
    else
      arg_rows_typed<false>(x, v, indices, K, R);
  });
}

void arg_reduce_cols(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t R, int64_t K) {
  ACTORCH_INTERNAL_ASSERT(R > 0, "arg reduction over an empty column");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    const T* x = static_cast<const T*>(in);
    T* v = static_cast<T*>(values);
    if (is_max)
      arg_cols_typed<true>(x, v, indices, R, K);
    else
      arg_cols_typed<false>(x, v, indices, R, K);
  });
}

} // namespace actorch::kernels::cpu
