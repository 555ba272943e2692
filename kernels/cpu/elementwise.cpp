// Elementwise CPU kernels: the loops, with the per-element arithmetic of kernels/functors.hpp
// (shared with the CUDA twin). 16-bit floats compute in float.
#include "kernels/cpu/elementwise.hpp"

#include <bit>
#include <cstdint>
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

template <class T>
void unary_typed(unary_op op, const strided_loop<2>& loop, const scalar* lo, const scalar* hi) {
  visit_unary<T>(op, lo, hi, [&]<class O, class F>(F f) { map1<O, T>(loop, f); });
}

template <class T>
void binary_typed(binary_op op, const strided_loop<3>& loop, const scalar& alpha) {
  visit_binary<T>(op, alpha, [&]<class O, class F>(F f) { map2<O, T>(loop, f); });
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

// c ? a : b on the values' bits under a mask, so that the compiler cannot make it a branch: a
// ReLU's mask (its backward is where(x > 0, g, 0)) is a coin flip per element, which a branch
// mispredicts half the time (GCC turned the plain ?: into one). Contiguous rows vectorise.
template <class T> inline T select(bool c, T a, T b) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  const U mask = U(U(0) - U(c));
  return std::bit_cast<T>(U((std::bit_cast<U>(a) & mask) | (std::bit_cast<U>(b) & U(~mask))));
}

void where(dtype t, const strided_loop<4>& loop) {
  dispatch(t, [&]<class T>() {
    for_each_row(loop, [](char** p, const int64_t* s, int64_t n) {
      const auto* c = reinterpret_cast<const bool*>(p[1]);
      const auto* a = reinterpret_cast<const T*>(p[2]);
      const auto* b = reinterpret_cast<const T*>(p[3]);
      auto* out = reinterpret_cast<T*>(p[0]);
      constexpr int64_t e = sizeof(T);
      if (s[0] == e && s[1] == 1 && s[2] == e && s[3] == 0) { // where(mask, x, scalar)
        const T other = *b;
        for (int64_t i = 0; i < n; ++i)
          out[i] = select(c[i], a[i], other);
      } else if (s[0] == e && s[1] == 1 && s[2] == e && s[3] == e) {
        for (int64_t i = 0; i < n; ++i)
          out[i] = select(c[i], a[i], b[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const T va = *reinterpret_cast<const T*>(p[2] + i * s[2]);
          const T vb = *reinterpret_cast<const T*>(p[3] + i * s[3]);
          *reinterpret_cast<T*>(p[0] + i * s[0]) =
              select(*reinterpret_cast<const bool*>(p[1] + i * s[1]), va, vb);
        }
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
