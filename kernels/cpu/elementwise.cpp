// Elementwise CPU kernels. 16-bit floats compute in float. Signed integer add, sub and mul
// wrap around on overflow as PyTorch's do (computed in unsigned arithmetic, where C++ defines
// wrapping; signed overflow would be undefined behaviour).
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class T> using C = compute_t<T>;

// Rows of out = f(in) with both operands of type T (out type O).
template <class O, class T, class F> void map1(const strided_loop<2>& loop, F f) {
  for_each_row(loop, [&f](char** p, const int64_t* s, int64_t n) {
    O* out = reinterpret_cast<O*>(p[0]);
    const T* in = reinterpret_cast<const T*>(p[1]);
    if (s[0] == int64_t(sizeof(O)) && s[1] == int64_t(sizeof(T))) {
      for (int64_t i = 0; i < n; ++i)
        out[i] = O(f(C<T>(in[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            O(f(C<T>(*reinterpret_cast<const T*>(p[1] + i * s[1]))));
    }
  });
}

// Rows of out = f(a, b), with fast paths for contiguous operands and a broadcast scalar on
// either side (the common `t * 2` and bias-add shapes).
template <class O, class T, class F> void map2(const strided_loop<3>& loop, F f) {
  for_each_row(loop, [&f](char** p, const int64_t* s, int64_t n) {
    O* out = reinterpret_cast<O*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    const T* b = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t so = sizeof(O), st = sizeof(T);
    if (s[0] == so && s[1] == st && s[2] == st) {
      for (int64_t i = 0; i < n; ++i)
        out[i] = O(f(C<T>(a[i]), C<T>(b[i])));
    } else if (s[0] == so && s[1] == st && s[2] == 0) {
      const C<T> bv = C<T>(*b);
      for (int64_t i = 0; i < n; ++i)
        out[i] = O(f(C<T>(a[i]), bv));
    } else if (s[0] == so && s[1] == 0 && s[2] == st) {
      const C<T> av = C<T>(*a);
      for (int64_t i = 0; i < n; ++i)
        out[i] = O(f(av, C<T>(b[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            O(f(C<T>(*reinterpret_cast<const T*>(p[1] + i * s[1])),
                C<T>(*reinterpret_cast<const T*>(p[2] + i * s[2]))));
    }
  });
}

template <class V> inline V wrap_add(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return V(std::make_unsigned_t<V>(a) + std::make_unsigned_t<V>(b));
  else
    return a + b;
}
template <class V> inline V wrap_sub(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return V(std::make_unsigned_t<V>(a) - std::make_unsigned_t<V>(b));
  else
    return a - b;
}
template <class V> inline V wrap_mul(V a, V b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return V(std::make_unsigned_t<V>(a) * std::make_unsigned_t<V>(b));
  else
    return a * b;
}

// NaN propagates from either side, as torch.maximum and torch.minimum do.
template <class V> inline V maximum_of(V a, V b) {
  if constexpr (std::is_floating_point_v<V>)
    if (std::isnan(a) || std::isnan(b))
      return a + b;
  return a > b ? a : b;
}
template <class V> inline V minimum_of(V a, V b) {
  if constexpr (std::is_floating_point_v<V>)
    if (std::isnan(a) || std::isnan(b))
      return a + b;
  return a < b ? a : b;
}

// Integer power by squaring; negative exponents are rejected, as PyTorch does.
template <class V> V int_pow(V base, V exp) {
  if constexpr (std::is_signed_v<V>)
    ACTORCH_CHECK(exp >= 0, "pow: integers to negative integer powers are not allowed (got ",
                  int64_t(exp), ")");
  V result = 1;
  while (exp) {
    if (exp & 1)
      result = wrap_mul(result, base);
    exp = V(exp >> 1);
    base = wrap_mul(base, base);
  }
  return result;
}

template <class T>
void unary_typed(unary_op op, const strided_loop<2>& loop, const scalar* lo, const scalar* hi) {
  using V = C<T>;
  switch (op) {
  case unary_op::neg:
    if constexpr (!std::is_same_v<T, bool>)
      map1<T, T>(loop, [](V x) { return wrap_sub(V(0), x); });
    return;
  case unary_op::abs:
    if constexpr (std::is_unsigned_v<V>)
      map1<T, T>(loop, [](V x) { return x; });
    else if constexpr (std::is_integral_v<V>)
      map1<T, T>(loop, [](V x) { return x < 0 ? wrap_sub(V(0), x) : x; });
    else
      map1<T, T>(loop, [](V x) { return std::abs(x); });
    return;
  case unary_op::relu: map1<T, T>(loop, [](V x) { return x > V(0) ? x : V(0); }); return;
  case unary_op::clamp: {
    const bool has_lo = lo != nullptr, has_hi = hi != nullptr;
    const V l = has_lo ? lo->to<V>() : V(0), h = has_hi ? hi->to<V>() : V(0);
    map1<T, T>(loop, [=](V x) {
      if constexpr (std::is_floating_point_v<V>)
        if (std::isnan(x))
          return x;
      if (has_lo && x < l)
        x = l;
      if (has_hi && x > h)
        x = h;
      return x;
    });
    return;
  }
  default: break;
  }
  if constexpr (std::is_floating_point_v<V>) {
    switch (op) {
    case unary_op::exp: map1<T, T>(loop, [](V x) { return std::exp(x); }); return;
    case unary_op::log: map1<T, T>(loop, [](V x) { return std::log(x); }); return;
    case unary_op::sqrt: map1<T, T>(loop, [](V x) { return std::sqrt(x); }); return;
    case unary_op::tanh: map1<T, T>(loop, [](V x) { return std::tanh(x); }); return;
    case unary_op::sigmoid:
      map1<T, T>(loop, [](V x) { return V(1) / (V(1) + std::exp(-x)); });
      return;
    default: break;
    }
  }
  ACTORCH_FAIL("unary kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

template <class T>
void binary_typed(binary_op op, const strided_loop<3>& loop, const scalar& alpha) {
  using V = C<T>;
  switch (op) {
  case binary_op::eq: map2<bool, T>(loop, [](V a, V b) { return a == b; }); return;
  case binary_op::ne: map2<bool, T>(loop, [](V a, V b) { return a != b; }); return;
  case binary_op::lt: map2<bool, T>(loop, [](V a, V b) { return a < b; }); return;
  case binary_op::le: map2<bool, T>(loop, [](V a, V b) { return a <= b; }); return;
  case binary_op::gt: map2<bool, T>(loop, [](V a, V b) { return a > b; }); return;
  case binary_op::ge: map2<bool, T>(loop, [](V a, V b) { return a >= b; }); return;
  case binary_op::maximum: map2<T, T>(loop, [](V a, V b) { return maximum_of(a, b); }); return;
  case binary_op::minimum: map2<T, T>(loop, [](V a, V b) { return minimum_of(a, b); }); return;
  default: break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    // bool arithmetic: add is logical or, mul logical and (PyTorch's results for bool inputs).
    if (op == binary_op::add && alpha.to<bool>()) {
      map2<T, T>(loop, [](bool a, bool b) { return a || b; });
      return;
    }
    if (op == binary_op::mul) {
      map2<T, T>(loop, [](bool a, bool b) { return a && b; });
      return;
    }
  } else {
    const V al = alpha.to<V>();
    switch (op) {
    case binary_op::add:
      if (al == V(1))
        map2<T, T>(loop, [](V a, V b) { return wrap_add(a, b); });
      else
        map2<T, T>(loop, [al](V a, V b) { return wrap_add(a, wrap_mul(al, b)); });
      return;
    case binary_op::sub:
      if (al == V(1))
        map2<T, T>(loop, [](V a, V b) { return wrap_sub(a, b); });
      else
        map2<T, T>(loop, [al](V a, V b) { return wrap_sub(a, wrap_mul(al, b)); });
      return;
    case binary_op::mul: map2<T, T>(loop, [](V a, V b) { return wrap_mul(a, b); }); return;
    case binary_op::div:
      if constexpr (std::is_floating_point_v<V>) {
        map2<T, T>(loop, [](V a, V b) { return a / b; });
        return;
      }
      break;
    case binary_op::pow:
      if constexpr (std::is_floating_point_v<V>)
        map2<T, T>(loop, [](V a, V b) { return b == V(2) ? a * a : std::pow(a, b); });
      else
        map2<T, T>(loop, [](V a, V b) { return int_pow(a, b); });
      return;
    default: break;
    }
  }
  ACTORCH_FAIL("binary kernel: op ", int(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

template <class T, combine_op Op>
void combine_typed(void* c, const void* a, const void* b, size_t n) {
  using V = C<T>;
  auto* pc = static_cast<T*>(c);
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    const V x = V(pa[i]), y = V(pb[i]);
    if constexpr (std::is_same_v<T, bool> && Op == combine_op::sum)
      pc[i] = x || y;
    else if constexpr (std::is_same_v<T, bool> && Op == combine_op::product)
      pc[i] = x && y;
    else if constexpr (Op == combine_op::sum)
      pc[i] = T(wrap_add(x, y));
    else if constexpr (Op == combine_op::product)
      pc[i] = T(wrap_mul(x, y));
    else if constexpr (Op == combine_op::min)
      pc[i] = T(minimum_of(x, y));
    else if constexpr (Op == combine_op::max)
      pc[i] = T(maximum_of(x, y));
    else if constexpr (Op == combine_op::band)
      pc[i] = T(x & y);
    else if constexpr (Op == combine_op::bor)
      pc[i] = T(x | y);
    else
      pc[i] = T(x ^ y);
  }
}

const char* combine_name(combine_op op) {
  switch (op) {
  case combine_op::sum: return "sum";
  case combine_op::product: return "product";
  case combine_op::min: return "min";
  case combine_op::max: return "max";
  case combine_op::band: return "band";
  case combine_op::bor: return "bor";
  case combine_op::bxor: return "bxor";
  }
  return "?";
}

} // namespace

combine_fn combine(combine_op op, dtype t) {
  return dispatch(t, [&]<class T>() -> combine_fn {
    switch (op) {
    case combine_op::sum: return combine_typed<T, combine_op::sum>;
    case combine_op::product: return combine_typed<T, combine_op::product>;
    case combine_op::min: return combine_typed<T, combine_op::min>;
    case combine_op::max: return combine_typed<T, combine_op::max>;
    default: break;
    }
    if constexpr (std::is_integral_v<C<T>>) {
      switch (op) {
      case combine_op::band: return combine_typed<T, combine_op::band>;
      case combine_op::bor: return combine_typed<T, combine_op::bor>;
      case combine_op::bxor: return combine_typed<T, combine_op::bxor>;
      default: break;
      }
    }
    ACTORCH_FAIL("combine kernel: ", combine_name(op), " is not defined for ", dtype_name(t));
  });
}

void unary(unary_op op, dtype t, const strided_loop<2>& loop, const scalar* lo, const scalar* hi) {
  dispatch(t, [&]<class T>() { unary_typed<T>(op, loop, lo, hi); });
}

void binary(binary_op op, dtype t, const strided_loop<3>& loop, const scalar& alpha) {
  dispatch(t, [&]<class T>() { binary_typed<T>(op, loop, alpha); });
}

void where(dtype t, const strided_loop<4>& loop) {
  dispatch(t, [&]<class T>() {
    for_each_row(loop, [](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
      }
    });
  });
}

void masked_fill(dtype t, const strided_loop<2>& loop, const scalar& value) {
  dispatch(t, [&]<class T>() {
    const T v = value.to<T>();
    for_each_row(loop, [v](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        if (*reinterpret_cast<const bool*>(p[1] + i * s[1]))
          *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

} // namespace actorch::kernels::cpu
