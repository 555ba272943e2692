// Softmax and log-softmax CPU kernels. The max is subtracted before exp so that no exp
// overflows; sums accumulate in double. Each (outer) slice is handled in one of two shapes:
// the last-dim case (inner == 1) reduces contiguous rows, the inner > 1 case keeps one
// accumulator per column and walks the N rows of `inner` contiguous elements.
#include "kernels/cpu/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class T> using C = compute_t<T>;

// exp(x - m) can be kept in the output between the passes only when T holds C<T> exactly;
// 16-bit outputs recompute it instead of rounding it twice.
template <class T> inline constexpr bool keeps_exp = std::is_same_v<T, C<T>>;

template <class T, bool Log> void forward_rows(const T* in, T* out, int64_t outer, int64_t N) {
  using V = C<T>;
  for (int64_t o = 0; o < outer; ++o) {
    const T* x = in + o * N;
    T* y = out + o * N;
    V m = V(x[0]);
    for (int64_t i = 1; i < N; ++i)
      m = V(x[i]) > m ? V(x[i]) : m;
    double s = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      const V e = std::exp(V(x[i]) - m);
      if constexpr (!Log && keeps_exp<T>)
        y[i] = e;
      s += double(e);
    }
    if constexpr (Log) {
      const V lse = V(std::log(s));
      for (int64_t i = 0; i < N; ++i)
        y[i] = T((V(x[i]) - m) - lse);
    } else {
      const V inv = V(1.0 / s);
      for (int64_t i = 0; i < N; ++i) {
        if constexpr (keeps_exp<T>)
          y[i] = y[i] * inv;
        else
          y[i] = T(std::exp(V(x[i]) - m) * inv);
      }
    }
  }
}

template <class T, bool Log>
void forward_cols(const T* in, T* out, int64_t outer, int64_t N, int64_t inner) {
  using V = C<T>;
  std::vector<V> m(static_cast<size_t>(inner));
  std::vector<double> s(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* x = in + o * N * inner;
    T* y = out + o * N * inner;
    for (int64_t j = 0; j < inner; ++j)
      m[size_t(j)] = V(x[j]);
    for (int64_t n = 1; n < N; ++n)
      for (int64_t j = 0; j < inner; ++j) {
        const V v = V(x[n * inner + j]);
        m[size_t(j)] = v > m[size_t(j)] ? v : m[size_t(j)];
      }
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < inner; ++j) {
        const V e = std::exp(V(x[n * inner + j]) - m[size_t(j)]);
        if constexpr (!Log && keeps_exp<T>)
          y[n * inner + j] = e;
        s[size_t(j)] += double(e);
      }
    if constexpr (Log) {
      for (int64_t j = 0; j < inner; ++j)
        s[size_t(j)] = std::log(s[size_t(j)]); // now the log-sum-exp, less the max
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < inner; ++j)
          y[n * inner + j] = T((V(x[n * inner + j]) - m[size_t(j)]) - V(s[size_t(j)]));
    } else {
      for (int64_t j = 0; j < inner; ++j)
        s[size_t(j)] = 1.0 / s[size_t(j)];
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < inner; ++j) {
          const size_t at = size_t(n * inner + j);
          if constexpr (keeps_exp<T>)
            y[at] = y[at] * V(s[size_t(j)]);
          else
            y[at] = T(std::exp(V(x[at]) - m[size_t(j)]) * V(s[size_t(j)]));
        }
    }
  }
}

// Backward. Both gradients need one sum along N per slice: of grad_out * out for softmax, of
// grad_out for log-softmax; then grad_in follows elementwise from that sum.
template <class T, bool Log> inline double backward_term(T g, T y) {
  return Log ? double(C<T>(g)) : double(C<T>(g)) * double(C<T>(y));
}

template <class T, bool Log> inline T backward_value(T g, T y, double sum) {
  using V = C<T>;
  if constexpr (Log)
    return T(V(g) - std::exp(V(y)) * V(sum));
  else
    return T(V(y) * (V(g) - V(sum)));
}

template <class T, bool Log>
void backward(const T* g, const T* y, T* gi, int64_t outer, int64_t N, int64_t inner) {
  std::vector<double> s(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t base = o * N * inner;
    if (inner == 1) {
      double acc = 0.0;
      for (int64_t i = 0; i < N; ++i)
        acc += backward_term<T, Log>(g[base + i], y[base + i]);
      for (int64_t i = 0; i < N; ++i)
        gi[base + i] = backward_value<T, Log>(g[base + i], y[base + i], acc);
      continue;
    }
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t at = base + n * inner + j;
        s[size_t(j)] += backward_term<T, Log>(g[at], y[at]);
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t at = base + n * inner + j;
        gi[at] = backward_value<T, Log>(g[at], y[at], s[size_t(j)]);
      }
  }
}

template <bool Log>
void forward(dtype t, const void* in, void* out, int64_t outer, int64_t N, int64_t inner) {
  if (outer == 0 || N == 0 || inner == 0)
    return;
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      const T* x = static_cast<const T*>(in);
      T* y = static_cast<T*>(out);
      if (inner == 1)
        forward_rows<T, Log>(x, y, outer, N);
      else
        forward_cols<T, Log>(x, y, outer, N, inner);
    } else {
      ACTORCH_FAIL("softmax kernel: not defined for ", dtype_name(t));
    }
  });
}

template <bool Log>
void backward(dtype t, const void* grad_out, const void* out, void* grad_in, int64_t outer,
              int64_t N, int64_t inner) {
  if (outer == 0 || N == 0 || inner == 0)
    return;
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>)
      backward<T, Log>(static_cast<const T*>(grad_out), static_cast<const T*>(out),
                       static_cast<T*>(grad_in), outer, N, inner);
    else
      ACTORCH_FAIL("softmax backward kernel: not defined for ", dtype_name(t));
  });
}

} // namespace

void softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N, int64_t inner) {
  forward<false>(t, in, out, outer, N, inner);
}

void log_softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N,
                         int64_t inner) {
  forward<true>(t, in, out, outer, N, inner);
}

void softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in, int64_t outer,
                      int64_t N, int64_t inner) {
  backward<false>(t, grad_out, out, grad_in, outer, N, inner);
}

void log_softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in,
                          int64_t outer, int64_t N, int64_t inner) {
  backward<true>(t, grad_out, out, grad_in, outer, N, inner);
}

} // namespace actorch::kernels::cpu
