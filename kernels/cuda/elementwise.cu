// Elementwise CUDA kernels: one thread per element over the strided loop, computing with the
// functors kernels/cpu/elementwise.cpp uses (kernels/functors.hpp).
#include "kernels/cuda/elementwise.hpp"

#include "kernels/cuda/launch.cuh"

namespace actorch::kernels::cuda {

namespace {

// out = f(in), stored as O.
template <class O, class T, class F> struct apply1 {
  F f;
  __device__ void operator()(char* (&p)[2]) const {
    *reinterpret_cast<O*>(p[0]) = O(f(compute_t<T>(*reinterpret_cast<const T*>(p[1]))));
  }
};

// out = f(a, b), stored as O.
template <class O, class T, class F> struct apply2 {
  F f;
  __device__ void operator()(char* (&p)[3]) const {
    *reinterpret_cast<O*>(p[0]) = O(f(compute_t<T>(*reinterpret_cast<const T*>(p[1])),
                                      compute_t<T>(*reinterpret_cast<const T*>(p[2]))));
  }
};

template <class T> struct apply_where {
  __device__ void operator()(char* (&p)[4]) const {
    const bool c = *reinterpret_cast<const bool*>(p[1]);
    *reinterpret_cast<T*>(p[0]) = *reinterpret_cast<const T*>(p[c ? 2 : 3]);
  }
};

template <class T> struct apply_masked_fill {
  T value;
  __device__ void operator()(char* (&p)[2]) const {
    if (*reinterpret_cast<const bool*>(p[1]))
      *reinterpret_cast<T*>(p[0]) = value;
  }
};

} // namespace

void unary(unary_op op, dtype t, const strided_loop<2>& loop, const scalar* lo, const scalar* hi) {
  dispatch(t, [&]<class T>() {
    visit_unary<T>(op, lo, hi, [&]<class O, class F>(F f) {
      launch_elementwise(loop, apply1<O, T, F>{f}, "unary");
    });
  });
}

void binary(binary_op op, dtype t, const strided_loop<3>& loop, const scalar& alpha) {
  dispatch(t, [&]<class T>() {
    visit_binary<T>(op, alpha, [&]<class O, class F>(F f) {
      launch_elementwise(loop, apply2<O, T, F>{f}, "binary");
    });
  });
}

void where(dtype t, const strided_loop<4>& loop) {
  dispatch(t, [&]<class T>() { launch_elementwise(loop, apply_where<T>{}, "where"); });
}

void masked_fill(dtype t, const strided_loop<2>& loop, const scalar& value) {
  dispatch(t, [&]<class T>() {
    launch_elementwise(loop, apply_masked_fill<T>{value.to<T>()}, "masked_fill");
  });
}

} // namespace actorch::kernels::cuda
