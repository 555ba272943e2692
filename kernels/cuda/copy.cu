// copy and fill on a CUDA device, one thread per element; conversions are kernels::convert's.
#include "kernels/cuda/copy.hpp"

#include "kernels/cuda/launch.cuh"
#include "kernels/functors.hpp"

namespace actorch::kernels::cuda {

namespace {

template <class D, class S> struct apply_copy {
  __device__ void operator()(char* (&p)[2]) const {
    *reinterpret_cast<D*>(p[0]) = convert<D>(*reinterpret_cast<const S*>(p[1]));
  }
};

template <class T> struct apply_fill {
  T value;
  __device__ void operator()(char* (&p)[1]) const { *reinterpret_cast<T*>(p[0]) = value; }
};

} // namespace

void copy(dtype dst, dtype src, const strided_loop<2>& loop) {
  dispatch(dst, [&]<class D>() {
    dispatch(src, [&]<class S>() { launch_elementwise(loop, apply_copy<D, S>{}, "copy"); });
  });
}

void fill(dtype t, const strided_loop<1>& loop, const scalar& value) {
  dispatch(t, [&]<class T>() { launch_elementwise(loop, apply_fill<T>{value.to<T>()}, "fill"); });
}

} // namespace actorch::kernels::cuda
