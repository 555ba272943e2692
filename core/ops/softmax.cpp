// softmax / log_softmax and their gradients: dtype and shape checks here, the loops in
// kernels/cpu/softmax. Inputs are made contiguous and seen as (outer, N, inner) around `dim`,
// so the kernel never needs strides; the result is contiguous in the input's shape.
#include "core/ops/softmax.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"

#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/cuda/softmax.hpp"

namespace actorch {

namespace kc = kernels::cpu;

namespace {

// A contiguous tensor viewed as (outer, N, inner) around dim d (all 1 for a 0-dim tensor).
struct around_dim {
  int64_t outer = 1, n = 1, inner = 1;
};

around_dim split_around(const shape_t& sizes, int64_t d) {
  around_dim s;
  for (int64_t i = 0; i < int64_t(sizes.size()); ++i) {
    const int64_t size = sizes[size_t(i)];
    (i < d ? s.outer : i == d ? s.n : s.inner) *= size;
  }
  return s;
}

void check_floating(const tensor& t, const char* op) {
  ACTORCH_CHECK(t.is_floating_point(), op, ": expected a floating point input but got ",
                dtype_name(t.dtype()), " (", op,
                " is not implemented for integer and bool tensors; convert with to(float32))");
}

// softmax (log false) or log_softmax along dim.
tensor forward(bool log, const char* op, const tensor& t, int64_t dim) {
  check_defined(op, {&t});
  check_floating(t, op);
  const int64_t d = wrap_dim(dim, t.dim(), op);
  const tensor in = t.contiguous();
  tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
  const around_dim s = split_around(t.sizes(), d);
  if (log)
    ACTORCH_KERNEL(t.device(), log_softmax_forward, t.dtype(), in.data_ptr(), out.data_ptr(),
                   s.outer, s.n, s.inner);
  else
    ACTORCH_KERNEL(t.device(), softmax_forward, t.dtype(), in.data_ptr(), out.data_ptr(), s.outer,
                   s.n, s.inner);
  return out;
}

tensor backward(bool log, const char* op, const tensor& grad_out, const tensor& out, int64_t dim) {
  check_defined(op, {&grad_out, &out});
  const device dev = common_device(op, {&grad_out, &out});
  check_floating(out, op);
  ACTORCH_CHECK(grad_out.sizes() == out.sizes(), op, ": grad_out has shape ",
                shape_str(grad_out.sizes()), " but the forward output has shape ",
                shape_str(out.sizes()));
  ACTORCH_CHECK(grad_out.dtype() == out.dtype(), op, ": grad_out has dtype ",
                dtype_name(grad_out.dtype()), " but the forward output has dtype ",
                dtype_name(out.dtype()));
  const int64_t d = wrap_dim(dim, out.dim(), op);
  const tensor g = grad_out.contiguous(), y = out.contiguous();
  tensor grad_in = empty(out.sizes(), {.dtype = out.dtype(), .device = dev});
  const around_dim s = split_around(out.sizes(), d);
  if (log)
    ACTORCH_KERNEL(dev, log_softmax_backward, out.dtype(), g.data_ptr(), y.data_ptr(),
                   grad_in.data_ptr(), s.outer, s.n, s.inner);
  else
    ACTORCH_KERNEL(dev, softmax_backward, out.dtype(), g.data_ptr(), y.data_ptr(),
                   grad_in.data_ptr(), s.outer, s.n, s.inner);
  return grad_in;
}

} // namespace

namespace {
// Softmax-family forward with the matching backward recorded on the output.
tensor tracked(const char* op, const char* node_name, bool log, const tensor& t, int64_t dim) {
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    out = forward(log, op, t, dim);
  }
  if (track)
    autograd::record(out, node_name, {&t}, {out.detach()},
                     [log, dim](const auto& g, const auto& s) {
                       return std::vector<tensor>{log ? log_softmax_backward(g[0], s[0], dim)
                                                      : softmax_backward(g[0], s[0], dim)};
                     });
  return out;
}
} // namespace

tensor softmax(const tensor& t, int64_t dim) {
  return tracked("softmax()", "SoftmaxBackward0", false, t, dim);
}

tensor log_softmax(const tensor& t, int64_t dim) {
  return tracked("log_softmax()", "LogSoftmaxBackward0", true, t, dim);
}

tensor softmax_backward(const tensor& grad_out, const tensor& out, int64_t dim) {
  return backward(false, "softmax_backward()", grad_out, out, dim);
}

tensor log_softmax_backward(const tensor& grad_out, const tensor& out, int64_t dim) {
  return backward(true, "log_softmax_backward()", grad_out, out, dim);
}

tensor tensor::softmax(int64_t dim) const {
  return actorch::softmax(*this, dim);
}
tensor tensor::log_softmax(int64_t dim) const {
  return actorch::log_softmax(*this, dim);
}

} // namespace actorch
