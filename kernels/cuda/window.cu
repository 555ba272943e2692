// The sliding-window kernels on a CUDA device: a grid-stride loop over the output elements,
// each thread running kernels/window.hpp's function for its element (the CPU loops run the
// same functions, so the CPU suite checks the arithmetic and the GPU check the launches).
#include "kernels/cuda/window.hpp"

#include "kernels/cuda/launch.cuh"

namespace actorch::kernels::cuda {

namespace {

enum class kind { im2col, col2im, max_pool, max_pool_backward, avg_pool, avg_pool_backward };

template <kind K, class T>
__global__ void window_kernel(const T* in, const int64_t* index_in, T* out, int64_t* index_out,
                              window2d g, average_rule r, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    if constexpr (K == kind::im2col)
      im2col_at(in, out, g, e);
    else if constexpr (K == kind::col2im)
      col2im_at(in, out, g, e);
    else if constexpr (K == kind::max_pool)
      max_pool_at(in, out, index_out, g, e);
    else if constexpr (K == kind::max_pool_backward)
      max_pool_backward_at(in, index_in, out, g, e);
    else if constexpr (K == kind::avg_pool)
      avg_pool_at(in, out, g, r, e);
    else
      avg_pool_backward_at(in, out, g, r, e);
  }
}

template <kind K>
void run(dtype t, const void* in, const int64_t* index_in, void* out, int64_t* index_out,
         const window2d& g, const average_rule& r, int64_t n, const char* name) {
  if (n == 0)
    return;
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      window_kernel<K, T><<<blocks_for(n), kThreads, 0, stream()>>>(
          static_cast<const T*>(in), index_in, static_cast<T*>(out), index_out, g, r, n);
      check_launch(name);
    } else {
      ACTORCH_FAIL(name, ": expected a floating point dtype but got ", dtype_name(t));
    }
  });
}

} // namespace

void im2col(dtype t, const void* x, void* col, const window2d& g) {
  run<kind::im2col>(t, x, nullptr, col, nullptr, g, {}, output_numel(g) * g.h.kernel * g.w.kernel,
                    "im2col");
}

void col2im(dtype t, const void* col, void* x, const window2d& g) {
  run<kind::col2im>(t, col, nullptr, x, nullptr, g, {}, input_numel(g), "col2im");
}

void max_pool2d(dtype t, const void* x, void* y, int64_t* index, const window2d& g) {
  run<kind::max_pool>(t, x, nullptr, y, index, g, {}, output_numel(g), "max_pool2d");
}

void max_pool2d_backward(dtype t, const void* gy, const int64_t* index, void* gx,
                         const window2d& g) {
  run<kind::max_pool_backward>(t, gy, index, gx, nullptr, g, {}, input_numel(g),
                               "max_pool2d_backward");
}

void avg_pool2d(dtype t, const void* x, void* y, const window2d& g, const average_rule& r) {
  run<kind::avg_pool>(t, x, nullptr, y, nullptr, g, r, output_numel(g), "avg_pool2d");
}

void avg_pool2d_backward(dtype t, const void* gy, void* gx, const window2d& g,
                         const average_rule& r) {
  run<kind::avg_pool_backward>(t, gy, nullptr, gx, nullptr, g, r, input_numel(g),
                               "avg_pool2d_backward");
}

} // namespace actorch::kernels::cuda
