// Softmax on a CUDA device. Each softmax runs along N with stride `inner`: for inner == 1 (the
// last dim) a block takes a row and its threads combine the max and the sum through shared
// memory; for inner > 1 a thread takes a column, and neighbouring threads read neighbouring
// addresses. As on the CPU, 16-bit floats compute in float and sums accumulate in double.
#include "kernels/cuda/softmax.hpp"

#include "kernels/cuda/launch.cuh"
#include "kernels/functors.hpp"

namespace actorch::kernels::cuda {

namespace {

template <class T> using C = compute_t<T>;

enum class kind { softmax, log_softmax, softmax_backward, log_softmax_backward };

// One softmax of n elements at x[0], x[stride], ... (and g, y for the backward kinds), computed
// by `lanes` threads of which this one is `lane`; Reduce combines the lanes' partial values.
template <kind K, class T, class Reduce>
__device__ void one(const T* x, const T* g, T* y, int64_t n, int64_t stride, int lane, int lanes,
                    Reduce reduce) {
  using V = C<T>;
  if constexpr (K == kind::softmax || K == kind::log_softmax) {
    V m = -INFINITY;
    for (int64_t i = lane; i < n; i += lanes)
      m = maximum_of(m, V(x[i * stride]));
    m = reduce(m, maximum_fn<V>{});
    double s = 0;
    for (int64_t i = lane; i < n; i += lanes)
      s += double(exp(V(x[i * stride]) - m));
    s = reduce(s, add_fn<double>{});
    for (int64_t i = lane; i < n; i += lanes) {
      const V d = V(x[i * stride]) - m;
      if constexpr (K == kind::softmax)
        y[i * stride] = T(V(double(exp(d)) / s));
      else
        y[i * stride] = T(V(double(d) - log(s)));
    }
  } else {
    // x is the forward output, g the gradient of the output, y the gradient of the input.
    double s = 0;
    for (int64_t i = lane; i < n; i += lanes)
      s += K == kind::softmax_backward ? double(V(g[i * stride])) * double(V(x[i * stride]))
                                       : double(V(g[i * stride]));
    s = reduce(s, add_fn<double>{});
    for (int64_t i = lane; i < n; i += lanes) {
      const double gi = double(V(g[i * stride])), xi = double(V(x[i * stride]));
      if constexpr (K == kind::softmax_backward)
        y[i * stride] = T(V(xi * (gi - s)));
      else
        y[i * stride] = T(V(gi - exp(xi) * s));
    }
  }
}

// inner == 1: a block per row.
template <kind K, class T>
__global__ void rows_kernel(const T* x, const T* g, T* y, int64_t outer, int64_t n) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x)
    one<K>(x + o * n, g ? g + o * n : nullptr, y + o * n, n, 1, int(threadIdx.x), int(blockDim.x),
           [](auto v, auto combine) { return block_reduce(v, combine); });
}

// inner > 1: a thread per (outer, inner) column.
template <kind K, class T>
__global__ void columns_kernel(const T* x, const T* g, T* y, int64_t outer, int64_t n,
                               int64_t inner) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < outer * inner; c += step) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    one<K>(x + base, g ? g + base : nullptr, y + base, n, inner, 0, 1,
           [](auto v, auto) { return v; });
  }
}

template <kind K>
void run(dtype t, const void* x, const void* g, void* y, int64_t outer, int64_t n, int64_t inner,
         const char* name) {
  if (outer == 0 || n == 0 || inner == 0)
    return;
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      const auto* xt = static_cast<const T*>(x);
      const auto* gt = static_cast<const T*>(g);
      auto* yt = static_cast<T*>(y);
      if (inner == 1)
        rows_kernel<K, T><<<block_per_row(outer), kThreads, 0, stream()>>>(xt, gt, yt, outer, n);
      else
        columns_kernel<K, T>
            <<<blocks_for(outer * inner), kThreads, 0, stream()>>>(xt, gt, yt, outer, n, inner);
      check_launch(name);
    } else {
      ACTORCH_FAIL(name, ": expected a floating point dtype but got ", dtype_name(t));
    }
  });
}

} // namespace

void softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N, int64_t inner) {
  run<kind::softmax>(t, in, nullptr, out, outer, N, inner, "softmax");
}

void log_softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N,
                         int64_t inner) {
  run<kind::log_softmax>(t, in, nullptr, out, outer, N, inner, "log_softmax");
}

void softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in, int64_t outer,
                      int64_t N, int64_t inner) {
  run<kind::softmax_backward>(t, out, grad_out, grad_in, outer, N, inner, "softmax_backward");
}

void log_softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in,
                          int64_t outer, int64_t N, int64_t inner) {
  run<kind::log_softmax_backward>(t, out, grad_out, grad_in, outer, N, inner,
                                  "log_softmax_backward");
}

} // namespace actorch::kernels::cuda
