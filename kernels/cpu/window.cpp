// The sliding-window kernels on the CPU: one loop over the output elements, each computed by
// kernels/window.hpp's function for it.
#include "kernels/cpu/window.hpp"

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

// f.template operator()<T>(e) for every e in [0, n), T the floating type of t.
template <class F> void each(dtype t, int64_t n, const char* op, F&& f) {
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      for (int64_t e = 0; e < n; ++e)
        f.template operator()<T>(e);
    } else {
      ACTORCH_FAIL(op, ": expected a floating point dtype but got ", dtype_name(t));
    }
  });
}

} // namespace

void im2col(dtype t, const void* x, void* col, const window2d& g) {
  each(t, output_numel(g) * g.h.kernel * g.w.kernel, "im2col", [&]<class T>(int64_t e) {
    im2col_at(static_cast<const T*>(x), static_cast<T*>(col), g, e);
  });
}

void col2im(dtype t, const void* col, void* x, const window2d& g) {
  each(t, input_numel(g), "col2im", [&]<class T>(int64_t e) {
    col2im_at(static_cast<const T*>(col), static_cast<T*>(x), g, e);
  });
}

void max_pool2d(dtype t, const void* x, void* y, int64_t* index, const window2d& g) {
  each(t, output_numel(g), "max_pool2d", [&]<class T>(int64_t e) {
    max_pool_at(static_cast<const T*>(x), static_cast<T*>(y), index, g, e);
  });
}

void max_pool2d_backward(dtype t, const void* gy, const int64_t* index, void* gx,
                         const window2d& g) {
  each(t, input_numel(g), "max_pool2d_backward", [&]<class T>(int64_t e) {
    max_pool_backward_at(static_cast<const T*>(gy), index, static_cast<T*>(gx), g, e);
  });
}

void avg_pool2d(dtype t, const void* x, void* y, const window2d& g, const average_rule& r) {
  each(t, output_numel(g), "avg_pool2d", [&]<class T>(int64_t e) {
    avg_pool_at(static_cast<const T*>(x), static_cast<T*>(y), g, r, e);
  });
}

void avg_pool2d_backward(dtype t, const void* gy, void* gx, const window2d& g,
                         const average_rule& r) {
  each(t, input_numel(g), "avg_pool2d_backward", [&]<class T>(int64_t e) {
    avg_pool_backward_at(static_cast<const T*>(gy), static_cast<T*>(gx), g, r, e);
  });
}

} // namespace actorch::kernels::cpu
