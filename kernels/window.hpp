// Sliding windows over the two spatial dims of (planes, H, W) images: im2col and col2im (what
// convolutions, unfold and fold run on) and max and average pooling, fixed or adaptive, with
// their gradients. Each function computes one output element from its flat index, written once
// for the CPU loops (kernels/cpu/window) and the CUDA threads (kernels/cuda/window), as the
// functors of functors.hpp are. Every gradient is a gather over the outputs that read an input
// element, never a scatter: no atomics on a GPU, and the same order of additions on both sides.
#pragma once

#include <cstdint>
#include <limits>

#include "base/dtype.hpp"
#include "base/host_device.hpp"

namespace actorch::kernels {

/// One spatial dim of a window op. A fixed window of output o starts at o * stride - pad and
/// reads `kernel` elements `dilation` apart; an adaptive one (adaptive pooling) covers
/// [floor(o * in / out), ceil((o + 1) * in / out)). Positions outside [0, in) are padding.
struct window_axis {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, pad = 0, dilation = 1;
  bool adaptive = false;
};

/// The geometry of a window op over `planes` (N * C) images of in.h x in.w elements.
struct window2d {
  int64_t planes = 1;
  window_axis h, w;
};

/// Elements of the planes' inputs and outputs: what the gradient and forward kernels run over.
inline int64_t input_numel(const window2d& g) {
  return g.planes * g.h.in * g.w.in;
}
inline int64_t output_numel(const window2d& g) {
  return g.planes * g.h.out * g.w.out;
}

/// The span [start, end) an output's window covers along `a`, unclamped (fixed windows: the
/// last element read is end - 1).
ACTORCH_HOST_DEVICE inline void window_span(const window_axis& a, int64_t o, int64_t& start,
                                            int64_t& end) {
  if (a.adaptive) {
    start = o * a.in / a.out;
    end = ((o + 1) * a.in + a.out - 1) / a.out;
  } else {
    start = o * a.stride - a.pad;
    end = start + (a.kernel - 1) * a.dilation + 1;
  }
}

/// A range [lo, hi] of outputs that includes every output whose window covers input i (a
/// superset: callers check membership).
ACTORCH_HOST_DEVICE inline void outputs_reading(const window_axis& a, int64_t i, int64_t& lo,
                                                int64_t& hi) {
  if (a.adaptive) {
    lo = i * a.out / a.in - 1;
    hi = ((i + 1) * a.out + a.in - 1) / a.in;
  } else {
    const int64_t first = i + a.pad - (a.kernel - 1) * a.dilation; // o * stride >= first
    lo = first <= 0 ? 0 : (first + a.stride - 1) / a.stride;
    hi = (i + a.pad) / a.stride;
  }
  lo = lo < 0 ? 0 : lo;
  hi = hi > a.out - 1 ? a.out - 1 : hi;
}

/// im2col: col is (planes / channels images) x (channels * kh * kw) x (out.h * out.w); element e
/// of col is the input element its kernel offset and output position read, or 0 in padding.
template <class T>
ACTORCH_HOST_DEVICE inline void im2col_at(const T* x, T* col, const window2d& g, int64_t e) {
  const int64_t ow = e % g.w.out, oh = e / g.w.out % g.h.out;
  const int64_t row = e / (g.w.out * g.h.out); // (plane, i, j), plane = image * C + c
  const int64_t j = row % g.w.kernel, i = row / g.w.kernel % g.h.kernel;
  const int64_t plane = row / (g.w.kernel * g.h.kernel);
  const int64_t h = oh * g.h.stride - g.h.pad + i * g.h.dilation;
  const int64_t w = ow * g.w.stride - g.w.pad + j * g.w.dilation;
  col[e] = h >= 0 && h < g.h.in && w >= 0 && w < g.w.in ? x[(plane * g.h.in + h) * g.w.in + w]
                                                        : T(compute_t<T>(0));
}

/// col2im, im2col's adjoint: x element e (of planes x in.h x in.w) is the sum of the col
/// elements that im2col would read from it.
template <class T>
ACTORCH_HOST_DEVICE inline void col2im_at(const T* col, T* x, const window2d& g, int64_t e) {
  const int64_t w = e % g.w.in, h = e / g.w.in % g.h.in, plane = e / (g.w.in * g.h.in);
  const int64_t L = g.h.out * g.w.out;
  acc_t<T> s = 0;
  for (int64_t i = 0; i < g.h.kernel; ++i) {
    const int64_t hs = h + g.h.pad - i * g.h.dilation; // oh * stride
    if (hs < 0 || hs % g.h.stride != 0 || hs / g.h.stride >= g.h.out)
      continue;
    for (int64_t j = 0; j < g.w.kernel; ++j) {
      const int64_t ws = w + g.w.pad - j * g.w.dilation;
      if (ws < 0 || ws % g.w.stride != 0 || ws / g.w.stride >= g.w.out)
        continue;
      const int64_t row = (plane * g.h.kernel + i) * g.w.kernel + j;
      s += acc_t<T>(compute_t<T>(col[row * L + hs / g.h.stride * g.w.out + ws / g.w.stride]));
    }
  }
  x[e] = T(compute_t<T>(s));
}

/// Max pooling: y element e (planes x out.h x out.w) is its window's maximum, NaN if any element
/// is NaN, and index[e] where it lies in its plane (h * in.w + w; the first in the window when
/// every element is -inf), as torch's.
template <class T>
ACTORCH_HOST_DEVICE inline void max_pool_at(const T* x, T* y, int64_t* index, const window2d& g,
                                            int64_t e) {
  using V = compute_t<T>;
  const int64_t ow = e % g.w.out, oh = e / g.w.out % g.h.out, plane = e / (g.w.out * g.h.out);
  int64_t h0, h1, w0, w1;
  window_span(g.h, oh, h0, h1);
  window_span(g.w, ow, w0, w1);
  const int64_t dh = g.h.adaptive ? 1 : g.h.dilation, dw = g.w.adaptive ? 1 : g.w.dilation;
  while (h0 < 0)
    h0 += dh;
  while (w0 < 0)
    w0 += dw;
  h1 = h1 < g.h.in ? h1 : g.h.in;
  w1 = w1 < g.w.in ? w1 : g.w.in;
  const T* p = x + plane * g.h.in * g.w.in;
  V best = -std::numeric_limits<V>::infinity();
  int64_t at = h0 * g.w.in + w0;
  for (int64_t h = h0; h < h1; h += dh)
    for (int64_t w = w0; w < w1; w += dw) {
      const V v = V(p[h * g.w.in + w]);
      if (v > best || v != v) {
        best = v;
        at = h * g.w.in + w;
      }
    }
  y[e] = T(best);
  index[e] = at;
}

/// max_pool_at's gradient: gx element e (planes x in.h x in.w) sums the gradients of the outputs
/// whose index names it.
template <class T>
ACTORCH_HOST_DEVICE inline void max_pool_backward_at(const T* gy, const int64_t* index, T* gx,
                                                     const window2d& g, int64_t e) {
  const int64_t w = e % g.w.in, h = e / g.w.in % g.h.in, plane = e / (g.w.in * g.h.in);
  int64_t oh0, oh1, ow0, ow1;
  outputs_reading(g.h, h, oh0, oh1);
  outputs_reading(g.w, w, ow0, ow1);
  const int64_t base = plane * g.h.out * g.w.out, self = h * g.w.in + w;
  acc_t<T> s = 0;
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      const int64_t o = base + oh * g.w.out + ow;
      if (index[o] == self)
        s += acc_t<T>(compute_t<T>(gy[o]));
    }
  gx[e] = T(compute_t<T>(s));
}

/// How average pooling divides a window's sum (torch's avg_pool2d arguments); adaptive windows
/// always divide by the number of elements they cover.
struct average_rule {
  bool count_include_pad = true;
  int64_t divisor_override = 0; // 0: none
};

/// The clamped window of output (oh, ow) and the number its sum is divided by.
ACTORCH_HOST_DEVICE inline int64_t average_window(const window2d& g, const average_rule& r,
                                                  int64_t oh, int64_t ow, int64_t& h0, int64_t& h1,
                                                  int64_t& w0, int64_t& w1) {
  window_span(g.h, oh, h0, h1);
  window_span(g.w, ow, w0, w1);
  int64_t padded = 0;
  if (!g.h.adaptive) { // a fixed window counts padding up to in + pad (ceil_mode's last one less)
    h1 = h1 < g.h.in + g.h.pad ? h1 : g.h.in + g.h.pad;
    w1 = w1 < g.w.in + g.w.pad ? w1 : g.w.in + g.w.pad;
    padded = (h1 - h0) * (w1 - w0);
  }
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < g.h.in ? h1 : g.h.in;
  w1 = w1 < g.w.in ? w1 : g.w.in;
  if (g.h.adaptive)
    return (h1 - h0) * (w1 - w0);
  if (r.divisor_override)
    return r.divisor_override;
  return r.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
}

/// Average pooling: y element e (planes x out.h x out.w) is its window's sum over the divisor.
template <class T>
ACTORCH_HOST_DEVICE inline void avg_pool_at(const T* x, T* y, const window2d& g,
                                            const average_rule& r, int64_t e) {
  const int64_t ow = e % g.w.out, oh = e / g.w.out % g.h.out, plane = e / (g.w.out * g.h.out);
  int64_t h0, h1, w0, w1;
  const int64_t divisor = average_window(g, r, oh, ow, h0, h1, w0, w1);
  const T* p = x + plane * g.h.in * g.w.in;
  acc_t<T> s = 0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w)
      s += acc_t<T>(compute_t<T>(p[h * g.w.in + w]));
  // An empty window (possible only with ceil_mode) divides 0 by its padded size, as torch does.
  y[e] = T(compute_t<T>(s / acc_t<T>(divisor > 0 ? divisor : 1)));
}

/// avg_pool_at's gradient: gx element e sums gy / divisor over the windows covering it.
template <class T>
ACTORCH_HOST_DEVICE inline void avg_pool_backward_at(const T* gy, T* gx, const window2d& g,
                                                     const average_rule& r, int64_t e) {
  const int64_t w = e % g.w.in, h = e / g.w.in % g.h.in, plane = e / (g.w.in * g.h.in);
  int64_t oh0, oh1, ow0, ow1;
  outputs_reading(g.h, h, oh0, oh1);
  outputs_reading(g.w, w, ow0, ow1);
  const int64_t base = plane * g.h.out * g.w.out;
  acc_t<T> s = 0;
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      int64_t h0, h1, w0, w1;
      const int64_t divisor = average_window(g, r, oh, ow, h0, h1, w0, w1);
      if (h >= h0 && h < h1 && w >= w0 && w < w1)
        s += acc_t<T>(compute_t<T>(gy[base + oh * g.w.out + ow])) / acc_t<T>(divisor);
    }
  gx[e] = T(compute_t<T>(s));
}

} // namespace actorch::kernels
