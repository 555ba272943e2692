// The per-element arithmetic of the elementwise and copy kernels, written once for the CPU
// loops (kernels/cpu/) and the CUDA kernels (kernels/cuda/): each functor is
// ACTORCH_HOST_DEVICE, and visit_unary / visit_binary pick the functor of an op for both. So
// the CPU suite, which CI runs without a GPU, exercises the arithmetic a GPU computes; only
// the launch code in kernels/cuda/ is left for a GPU to check (docs/architecture.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/host_device.hpp"
#include "base/scalar.hpp"

namespace actorch::kernels {

enum class unary_op { neg, abs, exp, log, sqrt, relu, sigmoid, tanh, clamp };

enum class binary_op { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };

inline bool is_comparison(binary_op op) {
  return op >= binary_op::eq;
}

/// A value of dtype S converted to dtype D as C++ converts (truncation toward zero for float to
/// int, as PyTorch's casts do); any value converted to bool is value != 0.
/// A floating value goes to uint8 through int64, as PyTorch casts it: a direct float -> uint8
/// cast of a negative value is undefined in C++, wrapping on x86 (-2.7 -> 254) and saturating
/// on a GPU (0); through int64 both wrap. (Values outside the other integer types' ranges are
/// undefined in PyTorch too, and differ between the devices.)
template <class D, class S> ACTORCH_HOST_DEVICE inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>)
    return static_cast<compute_t<S>>(v) != compute_t<S>(0);
  else if constexpr (std::is_same_v<D, S>)
    return v;
  else if constexpr (std::is_same_v<D, uint8_t> && std::is_floating_point_v<compute_t<S>>)
    return static_cast<D>(static_cast<int64_t>(static_cast<compute_t<S>>(v)));
  else
    return static_cast<D>(static_cast<compute_t<D>>(static_cast<compute_t<S>>(v)));
}

// Signed integer add, sub and mul wrap around on overflow as PyTorch's do: computed in unsigned
// arithmetic, where C++ defines wrapping (signed overflow would be undefined behaviour).
template <class V> ACTORCH_HOST_DEVICE inline V wrap_add(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return V(std::make_unsigned_t<V>(a) + std::make_unsigned_t<V>(b));
  else
    return a + b;
}
template <class V> ACTORCH_HOST_DEVICE inline V wrap_sub(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return V(std::make_unsigned_t<V>(a) - std::make_unsigned_t<V>(b));
  else
    return a - b;
}
// For int8 and int16 the unsigned type would be promoted to (signed) int before multiplying,
// which overflows for -1 * -1 in int16: multiply in unsigned int instead.
template <class V> ACTORCH_HOST_DEVICE inline V wrap_mul(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    using U = std::conditional_t<(sizeof(V) < sizeof(unsigned)), unsigned, std::make_unsigned_t<V>>;
    return V(U(std::make_unsigned_t<V>(a)) * U(std::make_unsigned_t<V>(b)));
  } else {
    return a * b;
  }
}

// NaN propagates from either side, as torch.maximum and torch.minimum do.
template <class V> ACTORCH_HOST_DEVICE inline V maximum_of(V a, V b) {
  if constexpr (std::is_floating_point_v<V>)
    if (std::isnan(a) || std::isnan(b))
      return a + b;
  return a > b ? a : b;
}
template <class V> ACTORCH_HOST_DEVICE inline V minimum_of(V a, V b) {
  if constexpr (std::is_floating_point_v<V>)
    if (std::isnan(a) || std::isnan(b))
      return a + b;
  return a < b ? a : b;
}

// Integer power by squaring. A negative exponent is an error on the CPU, as in PyTorch; a CUDA
// thread cannot throw, so there it gives PyTorch's CUDA result: 1 for base 1, +-1 for base -1,
// 0 otherwise.
template <class V> ACTORCH_HOST_DEVICE V int_pow(V base, V exp) {
  if constexpr (std::is_signed_v<V>) {
    if (exp < 0) {
#if defined(__CUDA_ARCH__)
      if (base == V(1))
        return V(1);
      if (base == V(-1))
        return (exp & 1) ? V(-1) : V(1);
      return V(0);
#else
      ACTORCH_FAIL("pow: integers to negative integer powers are not allowed (got ", int64_t(exp),
                   ")");
#endif
    }
  }
  V result = 1;
  while (exp) {
    if (exp & 1)
      result = wrap_mul(result, base);
    exp = V(exp >> 1);
    base = wrap_mul(base, base);
  }
  return result;
}

// Per-tensor affine quantization of one value, PyTorch's quantize_val: the product in float,
// rounded half to even, the zero point added in double (exact for every int32 + round), then
// saturated to T's range; +-inf saturate and NaN gives the minimum (PyTorch's result on x86).
template <class T>
ACTORCH_HOST_DEVICE inline T quantize_value(float x, float inv_scale, double zero_point) {
  constexpr double qmin = double(std::numeric_limits<T>::min());
  constexpr double qmax = double(std::numeric_limits<T>::max());
  const double v = double(std::nearbyint(x * inv_scale)) + zero_point;
  return std::isnan(v) ? T(qmin) : T(v < qmin ? qmin : v > qmax ? qmax : v);
}

template <class T>
ACTORCH_HOST_DEVICE inline float dequantize_value(T q, double scale, double zero_point) {
  return float((double(q) - zero_point) * scale);
}

// Unary functors over the compute type V. ------------------------------------------------------

template <class V> struct neg_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return wrap_sub(V(0), x); }
};
template <class V> struct abs_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const {
    if constexpr (std::is_unsigned_v<V>)
      return x;
    else if constexpr (std::is_integral_v<V>)
      return x < 0 ? wrap_sub(V(0), x) : x;
    else
      return std::abs(x);
  }
};
template <class V> struct relu_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return x > V(0) ? x : V(0); }
};
// min(max(x, lo), hi), either bound optional; NaN stays NaN.
template <class V> struct clamp_fn {
  bool has_lo, has_hi;
  V lo, hi;
  ACTORCH_HOST_DEVICE V operator()(V x) const {
    if constexpr (std::is_floating_point_v<V>)
      if (std::isnan(x))
        return x;
    if (has_lo && x < lo)
      x = lo;
    if (has_hi && x > hi)
      x = hi;
    return x;
  }
};
template <class V> struct exp_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return std::exp(x); }
};
template <class V> struct log_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return std::log(x); }
};
template <class V> struct sqrt_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return std::sqrt(x); }
};
template <class V> struct tanh_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return std::tanh(x); }
};
template <class V> struct sigmoid_fn {
  ACTORCH_HOST_DEVICE V operator()(V x) const { return V(1) / (V(1) + std::exp(-x)); }
};

// Binary functors. -------------------------------------------------------------------------------

template <class V> struct add_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return wrap_add(a, b); }
};
template <class V> struct add_scaled_fn { // a + alpha * b
  V alpha;
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return wrap_add(a, wrap_mul(alpha, b)); }
};
template <class V> struct sub_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return wrap_sub(a, b); }
};
template <class V> struct sub_scaled_fn { // a - alpha * b
  V alpha;
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return wrap_sub(a, wrap_mul(alpha, b)); }
};
template <class V> struct mul_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return wrap_mul(a, b); }
};
template <class V> struct div_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return a / b; }
};
template <class V> struct pow_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const {
    if constexpr (std::is_floating_point_v<V>)
      return b == V(2) ? a * a : std::pow(a, b);
    else
      return int_pow(a, b);
  }
};
template <class V> struct maximum_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return maximum_of(a, b); }
};
template <class V> struct minimum_fn {
  ACTORCH_HOST_DEVICE V operator()(V a, V b) const { return minimum_of(a, b); }
};
// bool arithmetic: add is logical or, mul logical and (PyTorch's results for bool inputs).
struct logical_or_fn {
  ACTORCH_HOST_DEVICE bool operator()(bool a, bool b) const { return a || b; }
};
struct logical_and_fn {
  ACTORCH_HOST_DEVICE bool operator()(bool a, bool b) const { return a && b; }
};
template <class V> struct eq_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a == b; }
};
template <class V> struct ne_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a != b; }
};
template <class V> struct lt_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a < b; }
};
template <class V> struct le_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a <= b; }
};
template <class V> struct gt_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a > b; }
};
template <class V> struct ge_fn {
  ACTORCH_HOST_DEVICE bool operator()(V a, V b) const { return a >= b; }
};

// Choosing the functor of an op. -----------------------------------------------------------------

/// Calls visit.template operator()<O>(f) with f the functor of `op` over T's compute type and O
/// the output's element type (T); for clamp, lo and hi are the bounds (either may be null).
/// Throws naming the op and dtype where `op` is not defined for T.
template <class T, class Visit>
void visit_unary(unary_op op, const scalar* lo, const scalar* hi, Visit&& visit) {
  using V = compute_t<T>;
  switch (op) {
  case unary_op::neg:
    if constexpr (!std::is_same_v<T, bool>) {
      visit.template operator()<T>(neg_fn<V>{});
      return;
    }
    break;
  case unary_op::abs: visit.template operator()<T>(abs_fn<V>{}); return;
  case unary_op::relu: visit.template operator()<T>(relu_fn<V>{}); return;
  case unary_op::clamp:
    visit.template operator()<T>(clamp_fn<V>{lo != nullptr, hi != nullptr, lo ? lo->to<V>() : V(0),
                                             hi ? hi->to<V>() : V(0)});
    return;
  default: break;
  }
  if constexpr (std::is_floating_point_v<V>) {
    switch (op) {
    case unary_op::exp: visit.template operator()<T>(exp_fn<V>{}); return;
    case unary_op::log: visit.template operator()<T>(log_fn<V>{}); return;
    case unary_op::sqrt: visit.template operator()<T>(sqrt_fn<V>{}); return;
    case unary_op::tanh: visit.template operator()<T>(tanh_fn<V>{}); return;
    case unary_op::sigmoid: visit.template operator()<T>(sigmoid_fn<V>{}); return;
    default: break;
    }
  }
  ACTORCH_FAIL("unary kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

/// Calls visit.template operator()<O>(f) with f the functor of `op` over T's compute type and O
/// the output's element type (bool for comparisons, T otherwise); add and sub compute
/// a + alpha * b and a - alpha * b. Throws naming the op and dtype where `op` is not defined
/// for T.
template <class T, class Visit>
void visit_binary(binary_op op, const scalar& alpha, Visit&& visit) {
  using V = compute_t<T>;
  switch (op) {
  case binary_op::eq: visit.template operator()<bool>(eq_fn<V>{}); return;
  case binary_op::ne: visit.template operator()<bool>(ne_fn<V>{}); return;
  case binary_op::lt: visit.template operator()<bool>(lt_fn<V>{}); return;
  case binary_op::le: visit.template operator()<bool>(le_fn<V>{}); return;
  case binary_op::gt: visit.template operator()<bool>(gt_fn<V>{}); return;
  case binary_op::ge: visit.template operator()<bool>(ge_fn<V>{}); return;
  case binary_op::maximum: visit.template operator()<T>(maximum_fn<V>{}); return;
  case binary_op::minimum: visit.template operator()<T>(minimum_fn<V>{}); return;
  default: break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (op == binary_op::add && alpha.to<bool>()) {
      visit.template operator()<T>(logical_or_fn{});
      return;
    }
    if (op == binary_op::mul) {
      visit.template operator()<T>(logical_and_fn{});
      return;
    }
  } else {
    const V al = alpha.to<V>();
    switch (op) {
    case binary_op::add:
      if (al == V(1))
        visit.template operator()<T>(add_fn<V>{});
      else
        visit.template operator()<T>(add_scaled_fn<V>{al});
      return;
    case binary_op::sub:
      if (al == V(1))
        visit.template operator()<T>(sub_fn<V>{});
      else
        visit.template operator()<T>(sub_scaled_fn<V>{al});
      return;
    case binary_op::mul: visit.template operator()<T>(mul_fn<V>{}); return;
    case binary_op::div:
      if constexpr (std::is_floating_point_v<V>) {
        visit.template operator()<T>(div_fn<V>{});
        return;
      }
      break;
    case binary_op::pow: visit.template operator()<T>(pow_fn<V>{}); return;
    default: break;
    }
  }
  ACTORCH_FAIL("binary kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

// Reductions. ------------------------------------------------------------------------------------

/// Whether v is NaN (never, for an integer).
template <class V> ACTORCH_HOST_DEVICE inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}

/// The divisor of var: max(0, R - correction). Zero gives nan (0/0), as torch.var does.
ACTORCH_HOST_DEVICE inline double var_divisor(int64_t r, int64_t correction) {
  return double(r - correction > 0 ? r - correction : 0);
}

/// A candidate for max/min with indices: a value and where it was (index < 0: none yet).
template <class V> struct arg_pair {
  V value;
  int64_t index;
};

/// The better candidate for max (IsMax) or min: the larger (smaller) value, a NaN over any
/// number, and between equals, NaNs included, the lower index; so the first extreme wins in
/// whatever order candidates are combined (a scan, or a GPU block's tree).
template <bool IsMax, class V>
ACTORCH_HOST_DEVICE inline arg_pair<V> better(arg_pair<V> a, arg_pair<V> b) {
  if (a.index < 0)
    return b;
  if (b.index < 0)
    return a;
  if (is_nan(a.value) || is_nan(b.value))
    return is_nan(b.value) && (!is_nan(a.value) || b.index < a.index) ? b : a;
  const bool beats = IsMax ? b.value > a.value : b.value < a.value;
  return beats || (b.value == a.value && b.index < a.index) ? b : a;
}

} // namespace actorch::kernels
