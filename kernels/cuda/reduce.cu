// Reductions on a CUDA device. Rows: one block per output, its threads striding over the row
// and combining through shared memory. Columns: one thread per output walking down its column,
// so neighbouring threads read neighbouring addresses. var and std take two passes (the mean,
// then the squared deviations), as the CPU kernel does.
#include "kernels/cuda/reduce.hpp"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/functors.hpp"

namespace actorch::kernels::cuda {

namespace {

template <class T> using C = compute_t<T>;

// What one reduction accumulates: A, its identity, a step per element, the combination of two
// partial results and the output.
template <class T, reduce_op Op> struct reducer;

template <class T> struct sum_reducer {
  using A = acc_t<T>;
  __device__ static A identity() { return A(0); }
  __device__ static A step(A a, T x) {
    if constexpr (std::is_floating_point_v<A>)
      return a + double(C<T>(x));
    else
      return wrap_add(a, int64_t(x));
  }
  __device__ static A combine(A a, A b) { return wrap_add(a, b); }
};
template <class T> struct reducer<T, reduce_op::sum> : sum_reducer<T> {
  using O = std::conditional_t<is_floating_v<T>, T, int64_t>;
  __device__ static O finish(acc_t<T> a, int64_t) { return O(C<O>(a)); }
};
template <class T> struct reducer<T, reduce_op::mean> : sum_reducer<T> {
  using O = T;
  __device__ static O finish(double a, int64_t R) { return T(C<T>(a / double(R))); }
};
template <class T, bool IsMax> struct extreme_reducer {
  using A = C<T>;
  using O = T;
  __device__ static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return IsMax ? -INFINITY : INFINITY;
    else
      return IsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  __device__ static A step(A a, T x) { return combine(a, C<T>(x)); }
  __device__ static A combine(A a, A b) { return IsMax ? maximum_of(a, b) : minimum_of(a, b); }
  __device__ static O finish(A a, int64_t) { return T(a); }
};
template <class T> struct reducer<T, reduce_op::amax> : extreme_reducer<T, true> {};
template <class T> struct reducer<T, reduce_op::amin> : extreme_reducer<T, false> {};
template <class T, bool Any> struct logical_reducer {
  using A = bool;
  using O = bool;
  __device__ static A identity() { return !Any; }
  __device__ static A step(A a, T x) { return combine(a, C<T>(x) != C<T>(0)); }
  __device__ static A combine(A a, A b) { return Any ? (a || b) : (a && b); }
  __device__ static O finish(A a, int64_t) { return a; }
};
template <class T> struct reducer<T, reduce_op::any> : logical_reducer<T, true> {};
template <class T> struct reducer<T, reduce_op::all> : logical_reducer<T, false> {};

// var (or std) of a row from its sum of squared deviations.
template <class T, reduce_op Op> __device__ T var_of(double m2, int64_t r, int64_t correction) {
  double v = m2 / var_divisor(r, correction);
  if constexpr (Op == reduce_op::std)
    v = sqrt(v);
  return T(C<T>(v));
}

template <class T, reduce_op Op>
__global__ void rows_kernel(const T* in, void* out_v, int64_t K, int64_t R, int64_t correction) {
  for (int64_t k = blockIdx.x; k < K; k += gridDim.x) {
    const T* row = in + k * R;
    if constexpr (Op == reduce_op::var || Op == reduce_op::std) {
      double s = 0;
      for (int64_t i = threadIdx.x; i < R; i += blockDim.x)
        s += double(C<T>(row[i]));
      const double mean = block_reduce(s, add_fn<double>{}) / double(R);
      double m2 = 0;
      for (int64_t i = threadIdx.x; i < R; i += blockDim.x) {
        const double d = double(C<T>(row[i])) - mean;
        m2 += d * d;
      }
      m2 = block_reduce(m2, add_fn<double>{});
      if (threadIdx.x == 0)
        static_cast<T*>(out_v)[k] = var_of<T, Op>(m2, R, correction);
    } else {
      using Red = reducer<T, Op>;
      auto a = Red::identity();
      for (int64_t i = threadIdx.x; i < R; i += blockDim.x)
        a = Red::step(a, row[i]);
      a = block_reduce(a, [](auto x, auto y) { return Red::combine(x, y); });
      if (threadIdx.x == 0)
        static_cast<typename Red::O*>(out_v)[k] = Red::finish(a, R);
    }
  }
}

template <class T, reduce_op Op>
__global__ void cols_kernel(const T* in, void* out_v, int64_t R, int64_t K, int64_t correction) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < K; j += step) {
    if constexpr (Op == reduce_op::var || Op == reduce_op::std) {
      double s = 0;
      for (int64_t i = 0; i < R; ++i)
        s += double(C<T>(in[i * K + j]));
      const double mean = s / double(R);
      double m2 = 0;
      for (int64_t i = 0; i < R; ++i) {
        const double d = double(C<T>(in[i * K + j])) - mean;
        m2 += d * d;
      }
      static_cast<T*>(out_v)[j] = var_of<T, Op>(m2, R, correction);
    } else {
      using Red = reducer<T, Op>;
      auto a = Red::identity();
      for (int64_t i = 0; i < R; ++i)
        a = Red::step(a, in[i * K + j]);
      static_cast<typename Red::O*>(out_v)[j] = Red::finish(a, R);
    }
  }
}

// Calls fn.template operator()<Op>() for the runtime op; mean, var and std only for floats.
template <class T, class Fn> void with_op(reduce_op op, Fn&& fn) {
  switch (op) {
  case reduce_op::sum: fn.template operator()<reduce_op::sum>(); return;
  case reduce_op::amax: fn.template operator()<reduce_op::amax>(); return;
  case reduce_op::amin: fn.template operator()<reduce_op::amin>(); return;
  case reduce_op::any: fn.template operator()<reduce_op::any>(); return;
  case reduce_op::all: fn.template operator()<reduce_op::all>(); return;
  default: break;
  }
  if constexpr (is_floating_v<T>) {
    switch (op) {
    case reduce_op::mean: fn.template operator()<reduce_op::mean>(); return;
    case reduce_op::var: fn.template operator()<reduce_op::var>(); return;
    case reduce_op::std: fn.template operator()<reduce_op::std>(); return;
    default: break;
    }
  }
  ACTORCH_FAIL("reduce kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

// Calls fn.template operator()<IsMax>() for max (true) or min.
template <class Fn> void with_extreme(bool is_max, Fn&& fn) {
  if (is_max)
    fn.template operator()<true>();
  else
    fn.template operator()<false>();
}

// The index of the first extreme: arg_pair and better (kernels/functors.hpp).

template <bool IsMax, class T>
__global__ void arg_rows_kernel(const T* in, T* values, int64_t* indices, int64_t K, int64_t R) {
  using P = arg_pair<C<T>>;
  for (int64_t k = blockIdx.x; k < K; k += gridDim.x) {
    const T* row = in + k * R;
    P p{C<T>(0), -1};
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x)
      p = better<IsMax>(p, P{C<T>(row[i]), i});
    p = block_reduce(p, [](P a, P b) { return better<IsMax>(a, b); });
    if (threadIdx.x == 0) {
      if (values)
        values[k] = T(p.value);
      if (indices)
        indices[k] = p.index;
    }
  }
}

template <bool IsMax, class T>
__global__ void arg_cols_kernel(const T* in, T* values, int64_t* indices, int64_t R, int64_t K) {
  using P = arg_pair<C<T>>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < K; j += step) {
    P p{C<T>(0), -1};
    for (int64_t i = 0; i < R; ++i)
      p = better<IsMax>(p, P{C<T>(in[i * K + j]), i});
    if (values)
      values[j] = T(p.value);
    if (indices)
      indices[j] = p.index;
  }
}

} // namespace

void reduce_rows(reduce_op op, dtype t, const void* in, void* out, int64_t K, int64_t R,
                 int64_t correction) {
  ACTORCH_CHECK(R > 0 || (op != reduce_op::amax && op != reduce_op::amin),
                "amax/amin over an empty row");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    with_op<T>(op, [&]<reduce_op Op>() {
      rows_kernel<T, Op><<<block_per_row(K), kThreads, 0, stream()>>>(static_cast<const T*>(in),
                                                                      out, K, R, correction);
      check_launch("reduce_rows");
    });
  });
}

void reduce_cols(reduce_op op, dtype t, const void* in, void* out, int64_t R, int64_t K,
                 int64_t correction) {
  ACTORCH_CHECK(R > 0 || (op != reduce_op::amax && op != reduce_op::amin),
                "amax/amin over an empty column");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    with_op<T>(op, [&]<reduce_op Op>() {
      cols_kernel<T, Op><<<blocks_for(K), kThreads, 0, stream()>>>(static_cast<const T*>(in), out,
                                                                   R, K, correction);
      check_launch("reduce_cols");
    });
  });
}

void arg_reduce_rows(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t K, int64_t R) {
  ACTORCH_CHECK(R > 0, "max/min over an empty row");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    with_extreme(is_max, [&]<bool IsMax>() {
      arg_rows_kernel<IsMax, T><<<block_per_row(K), kThreads, 0, stream()>>>(
          static_cast<const T*>(in), static_cast<T*>(values), indices, K, R);
    });
    check_launch("arg_reduce_rows");
  });
}

void arg_reduce_cols(bool is_max, dtype t, const void* in, void* values, int64_t* indices,
                     int64_t R, int64_t K) {
  ACTORCH_CHECK(R > 0, "max/min over an empty column");
  if (K == 0)
    return;
  dispatch(t, [&]<class T>() {
    with_extreme(is_max, [&]<bool IsMax>() {
      arg_cols_kernel<IsMax, T><<<blocks_for(K), kThreads, 0, stream()>>>(
          static_cast<const T*>(in), static_cast<T*>(values), indices, R, K);
    });
    check_launch("arg_reduce_cols");
  });
}

} // namespace actorch::kernels::cuda
