// make_loop: from tensors to the kernels' strided loops. See kernels/loop.hpp.
#include "core/tensor_iterator.hpp"

#include "core/ops/factory.hpp"

namespace actorch {

shape_t broadcast_strides(const tensor& t, const shape_t& shape) {
  const int64_t nd = int64_t(shape.size());
  const int64_t td = t.dim();
  ACTORCH_INTERNAL_ASSERT(td <= nd, "broadcast of ", shape_str(t.sizes()), " to ",
                          shape_str(shape));
  shape_t st(size_t(nd), 0);
  for (int64_t i = 0; i < td; ++i) {
    const int64_t d = nd - td + i;
    const int64_t s = t.sizes()[size_t(i)];
    ACTORCH_INTERNAL_ASSERT(s == shape[size_t(d)] || s == 1, "broadcast of ", shape_str(t.sizes()),
                            " to ", shape_str(shape));
    st[size_t(d)] = (s == 1 && shape[size_t(d)] != 1) ? 0 : t.strides()[size_t(i)];
  }
  return st;
}

template <int N>
kernels::strided_loop<N> make_loop(const tensor& out, std::array<const tensor*, N - 1> inputs) {
  const shape_t& shape = out.sizes();
  const int nd = int(shape.size());
  std::array<shape_t, N> st;
  std::array<int64_t, N> esize;
  std::array<const tensor*, N> ops;
  ops[0] = &out;
  for (int k = 1; k < N; ++k)
    ops[size_t(k)] = inputs[size_t(k - 1)];
  for (int k = 0; k < N; ++k) {
    st[size_t(k)] = k == 0 ? out.strides() : broadcast_strides(*ops[size_t(k)], shape);
    esize[size_t(k)] = int64_t(ops[size_t(k)]->element_size());
  }

  kernels::strided_loop<N> loop;
  for (int d = 0; d < nd; ++d) {
    const int64_t size = shape[size_t(d)];
    if (size == 1)
      continue;
    if (loop.ndim > 0) {
      // Merge d into the previous kept dim when that dim steps exactly over all of d's
      // elements in every operand.
      const int p = loop.ndim - 1;
      bool mergeable = true;
      for (int k = 0; k < N && mergeable; ++k)
        mergeable = loop.strides[k][p] == st[size_t(k)][size_t(d)] * size * esize[size_t(k)];
      if (mergeable) {
        loop.sizes[p] *= size;
        for (int k = 0; k < N; ++k)
          loop.strides[k][p] = st[size_t(k)][size_t(d)] * esize[size_t(k)];
        continue;
      }
    }
    ACTORCH_CHECK(loop.ndim < kernels::kMaxDims, "tensors with more than ", kernels::kMaxDims,
                  " non-mergeable dims are not supported (shape ", shape_str(shape), ")");
    loop.sizes[loop.ndim] = size;
    for (int k = 0; k < N; ++k)
      loop.strides[k][loop.ndim] = st[size_t(k)][size_t(d)] * esize[size_t(k)];
    ++loop.ndim;
  }
  for (int k = 0; k < N; ++k)
    loop.data[k] = static_cast<char*>(ops[size_t(k)]->data_ptr());
  return loop;
}

template kernels::strided_loop<1> make_loop<1>(const tensor&, std::array<const tensor*, 0>);
template kernels::strided_loop<2> make_loop<2>(const tensor&, std::array<const tensor*, 1>);
template kernels::strided_loop<3> make_loop<3>(const tensor&, std::array<const tensor*, 2>);
template kernels::strided_loop<4> make_loop<4>(const tensor&, std::array<const tensor*, 3>);

void check_cpu(const char* op, std::initializer_list<const tensor*> ts) {
  for (const tensor* t : ts)
    ACTORCH_CHECK(t->device().is_cpu(), op, ": expected CPU tensors but got a tensor on ",
                  t->device(), " (actorch has no CUDA kernel for ", op, " yet)");
}

device common_device(const char* op, std::initializer_list<const tensor*> ts) {
  const device d = (*ts.begin())->device();
  for (const tensor* t : ts)
    ACTORCH_CHECK(t->device() == d, op,
                  ": expected all tensors to be on the same device, but found at least two "
                  "devices, ",
                  d, " and ", t->device());
  return d;
}

tensor scalar_to_device(const tensor& t, const device& d) {
  if (t.dim() != 0 || !t.device().is_cpu() || !d.is_cuda())
    return t;
  if (t.requires_grad()) // its gradient comes back to the CPU through to()'s backward
    return t.to(d);
  // Its value filled in on the device: a copy from pageable memory would wait for the stream.
  return full({}, read_scalar(t, t.storage_offset()), {.dtype = t.dtype(), .device = d});
}

void check_defined(const char* op, std::initializer_list<const tensor*> ts) {
  for (const tensor* t : ts)
    ACTORCH_CHECK(t->defined(), op, ": got an undefined tensor");
}

} // namespace actorch
