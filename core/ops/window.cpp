// Sliding-window ops: argument checks and output sizes here (torch's rules and messages), the
// loops in kernels/{cpu,cuda}/window. im2col and col2im are each other's gradient; a
// convolution is im2col followed by a matrix product, so its gradients come from matmul's and
// col2im. Every op takes (N, C, H, W) or an unbatched (C, H, W) input, which runs as N = 1.
#include "core/ops/window.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/linalg.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/window.hpp"
#include "kernels/cuda/window.hpp"

namespace actorch {

namespace {

using kernels::average_rule;
using kernels::window2d;
using kernels::window_axis;

std::string pair_str(int2 v) {
  return "(" + std::to_string(v.h) + ", " + std::to_string(v.w) + ")";
}

// The input as (N, C, H, W) (`spatial` == 2) or (N, C, L) (`spatial` == 1), adding N = 1 to an
// unbatched one; `unbatched` says whether the result must lose it again.
tensor batched(const tensor& input, int64_t spatial, const char* op, bool& unbatched) {
  check_defined(op, {&input});
  const int64_t d = input.dim();
  ACTORCH_CHECK(d == spatial + 1 || d == spatial + 2, "Expected ", spatial + 1, "D (unbatched) or ",
                spatial + 2, "D (batched) input to ", op,
                ", but got input of size: ", shape_str(input.sizes()));
  ACTORCH_CHECK(input.is_floating_point(), op, ": expected a floating point input but got ",
                dtype_name(input.dtype()), " (\"", op,
                "\" is not implemented for integer and bool ",
                "tensors, as in torch; convert with to(float32))");
  unbatched = d == spatial + 1;
  return unbatched ? input.unsqueeze(0) : input;
}

tensor unbatch(const tensor& t, bool unbatched) {
  return unbatched ? t.squeeze(0) : t;
}

void check_positive(const char* op, const char* what, int2 v) {
  ACTORCH_CHECK(v.h > 0 && v.w > 0, op, ": ", what, " must be greater than zero, but got ",
                pair_str(v));
}

// torch's pooling_output_shape: floor or ceil of (in + 2 pad - dilation (k - 1) - 1) / stride,
// plus 1; with ceil_mode a last window starting in the right padding is dropped.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p)
    --out;
  return out;
}

// The geometry of a pooling window over x (N, C, H, W), checked as torch's pool2d_shape_check.
window2d pool_geometry(const char* op, const tensor& x, int2 k, int2 s, int2 p, int2 d,
                       bool ceil_mode) {
  check_positive(op, "kernel_size", k);
  check_positive(op, "stride", s);
  check_positive(op, "dilation", d);
  ACTORCH_CHECK(p.h >= 0 && p.w >= 0, op, ": padding must be non-negative, but got ", pair_str(p));
  ACTORCH_CHECK(p.h <= k.h / 2 && p.w <= k.w / 2, op,
                ": pad should be at most half of effective kernel size, but got pad=", pair_str(p),
                ", kernel_size=", pair_str(k));
  window2d g;
  g.planes = x.size(0) * x.size(1);
  g.h = {x.size(2), pooled_size(x.size(2), k.h, s.h, p.h, d.h, ceil_mode), k.h, s.h, p.h, d.h};
  g.w = {x.size(3), pooled_size(x.size(3), k.w, s.w, p.w, d.w, ceil_mode), k.w, s.w, p.w, d.w};
  ACTORCH_CHECK(g.h.out >= 1 && g.w.out >= 1, op, ": given input size ", shape_str(x.sizes()),
                ", the calculated output size (", g.h.out, "x", g.w.out, ") is too small");
  return g;
}

window2d adaptive_geometry(const char* op, const tensor& x, int2 out) {
  check_positive(op, "output_size", out);
  ACTORCH_CHECK(x.size(2) > 0 && x.size(3) > 0, op,
                ": expected an input with non-zero spatial sizes, but got ", shape_str(x.sizes()));
  window2d g;
  g.planes = x.size(0) * x.size(1);
  g.h = {.in = x.size(2), .out = out.h, .adaptive = true};
  g.w = {.in = x.size(3), .out = out.w, .adaptive = true};
  return g;
}

tensor plane_output(const tensor& x, const window2d& g) {
  return empty({x.size(0), x.size(1), g.h.out, g.w.out},
               {.dtype = x.dtype(), .device = x.device()});
}

// im2col and col2im, each recording the other as its gradient.
tensor im2col(const tensor& x, const window2d& g);
tensor col2im(const tensor& cols, const window2d& g, int64_t n, int64_t c);

tensor im2col(const tensor& x, const window2d& g) {
  const int64_t n = x.size(0), c = x.size(1);
  const tensor in = x.contiguous();
  tensor cols = empty({n, c * g.h.kernel * g.w.kernel, g.h.out * g.w.out},
                      {.dtype = x.dtype(), .device = x.device()});
  ACTORCH_KERNEL(x.device(), im2col, x.dtype(), in.data_ptr(), cols.data_ptr(), g);
  if (autograd::needs_grad({&x}))
    autograd::record(cols, "Im2ColBackward0", {&x}, {}, [g, n, c](const auto& grad, const auto&) {
      return std::vector<tensor>{col2im(grad[0], g, n, c)};
    });
  return cols;
}

tensor col2im(const tensor& cols, const window2d& g, int64_t n, int64_t c) {
  const tensor in = cols.contiguous();
  tensor x = empty({n, c, g.h.in, g.w.in}, {.dtype = cols.dtype(), .device = cols.device()});
  ACTORCH_KERNEL(cols.device(), col2im, cols.dtype(), in.data_ptr(), x.data_ptr(), g);
  if (autograd::needs_grad({&cols}))
    autograd::record(x, "Col2ImBackward0", {&cols}, {}, [g](const auto& grad, const auto&) {
      return std::vector<tensor>{im2col(grad[0], g)};
    });
  return x;
}

// The geometry of unfold/fold/conv along one dim, torch's output size.
window_axis conv_axis(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return {in, (in + 2 * p - d * (k - 1) - 1) / s + 1, k, s, p, d};
}

void check_window_args(const char* op, int2 k, int2 d, int2 p, int2 s) {
  check_positive(op, "kernel_size", k);
  check_positive(op, "dilation", d);
  check_positive(op, "stride", s);
  ACTORCH_CHECK(p.h >= 0 && p.w >= 0, op, ": padding must be non-negative, but got ", pair_str(p));
}

// Max pooling over x (N, C, H, W), fixed or adaptive; the gradient reads the indices.
std::pair<tensor, tensor> max_pool(const tensor& x, const window2d& g) {
  tensor y = plane_output(x, g);
  tensor index = empty(y.sizes(), {.dtype = dtype::int64, .device = x.device()});
  const tensor in = x.contiguous();
  ACTORCH_KERNEL(x.device(), max_pool2d, x.dtype(), in.data_ptr(), y.data_ptr(),
                 index.data_ptr<int64_t>(), g);
  if (autograd::needs_grad({&x}))
    autograd::record(y,
                     g.h.adaptive ? "AdaptiveMaxPool2DBackward0" : "MaxPool2DWithIndicesBackward0",
                     {&x}, {index}, [g, sizes = x.sizes()](const auto& grad, const auto& saved) {
                       const tensor gy = grad[0].contiguous();
                       tensor gx = empty(sizes, {.dtype = gy.dtype(), .device = gy.device()});
                       ACTORCH_KERNEL(gy.device(), max_pool2d_backward, gy.dtype(), gy.data_ptr(),
                                      saved[0].template data_ptr<int64_t>(), gx.data_ptr(), g);
                       return std::vector<tensor>{gx};
                     });
  return {y, index};
}

tensor avg_pool(const tensor& x, const window2d& g, const average_rule& r) {
  tensor y = plane_output(x, g);
  const tensor in = x.contiguous();
  ACTORCH_KERNEL(x.device(), avg_pool2d, x.dtype(), in.data_ptr(), y.data_ptr(), g, r);
  if (autograd::needs_grad({&x}))
    autograd::record(y, g.h.adaptive ? "AdaptiveAvgPool2DBackward0" : "AvgPool2DBackward0", {&x},
                     {}, [g, r, sizes = x.sizes()](const auto& grad, const auto&) {
                       const tensor gy = grad[0].contiguous();
                       tensor gx = empty(sizes, {.dtype = gy.dtype(), .device = gy.device()});
                       ACTORCH_KERNEL(gy.device(), avg_pool2d_backward, gy.dtype(), gy.data_ptr(),
                                      gx.data_ptr(), g, r);
                       return std::vector<tensor>{gx};
                     });
  return y;
}

} // namespace

tensor unfold(const tensor& input, int2 k, int2 d, int2 p, int2 s) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "unfold", unbatched);
  check_window_args("unfold", k, d, p, s);
  window2d g;
  g.planes = x.size(0) * x.size(1);
  g.h = conv_axis(x.size(2), k.h, s.h, p.h, d.h);
  g.w = conv_axis(x.size(3), k.w, s.w, p.w, d.w);
  ACTORCH_CHECK(g.h.out >= 1 && g.w.out >= 1, "unfold: given input with spatial size ",
                pair_str({x.size(2), x.size(3)}), ", kernel_size=", pair_str(k),
                ", dilation=", pair_str(d), ", padding=", pair_str(p),
                ", the calculated shape of the array of sliding blocks is ",
                pair_str({g.h.out, g.w.out}), ", but its components must be at least one");
  return unbatch(im2col(x, g), unbatched);
}

tensor fold(const tensor& input, int2 out, int2 k, int2 d, int2 p, int2 s) {
  check_defined("fold", {&input});
  ACTORCH_CHECK(input.dim() == 2 || input.dim() == 3,
                "Expected 2D (unbatched) or 3D (batched) input to fold, but got input of size: ",
                shape_str(input.sizes()));
  ACTORCH_CHECK(input.is_floating_point(), "fold: expected a floating point input but got ",
                dtype_name(input.dtype()));
  check_window_args("fold", k, d, p, s);
  check_positive("fold", "output_size", out);
  const bool unbatched = input.dim() == 2;
  const tensor cols = unbatched ? input.unsqueeze(0) : input;
  const int64_t per_channel = k.h * k.w;
  ACTORCH_CHECK(cols.size(1) % per_channel == 0,
                "fold: expected size of input's dimension 1 to "
                "be divisible by the product of kernel_size, but got input.size(1)=",
                cols.size(1), " and kernel_size=", pair_str(k));
  window2d g;
  g.planes = cols.size(0) * (cols.size(1) / per_channel);
  g.h = conv_axis(out.h, k.h, s.h, p.h, d.h);
  g.w = conv_axis(out.w, k.w, s.w, p.w, d.w);
  ACTORCH_CHECK(g.h.out >= 1 && g.w.out >= 1 && cols.size(2) == g.h.out * g.w.out,
                "fold: given output_size=", pair_str(out), ", kernel_size=", pair_str(k),
                ", dilation=", pair_str(d), ", padding=", pair_str(p), ", stride=", pair_str(s),
                ", expected size of input's dimension 2 to match the calculated number of sliding "
                "blocks ",
                g.h.out, " * ", g.w.out, " = ", g.h.out * g.w.out,
                ", but got input.size(2)=", cols.size(2));
  return unbatch(col2im(cols, g, cols.size(0), cols.size(1) / per_channel), unbatched);
}

namespace {

// conv2d on (N, C, H, W) with checked arguments; `op` names conv1d or conv2d in messages.
tensor convolution(const char* op, const tensor& x, const tensor& weight, const tensor& bias,
                   int2 s, const conv_padding& padding, int2 d, int64_t groups) {
  check_defined(op, {&weight});
  if (bias.defined())
    common_device(op, {&x, &weight, &bias});
  else
    common_device(op, {&x, &weight});
  ACTORCH_CHECK(weight.dim() == 4, op,
                ": expected a weight of 4 dims (out_channels, "
                "in_channels / groups, kh, kw), but got shape ",
                shape_str(weight.sizes()));
  ACTORCH_CHECK(weight.dtype() == x.dtype(), op, ": input type (", dtype_name(x.dtype()),
                ") and weight type (", dtype_name(weight.dtype()), ") should be the same");
  ACTORCH_CHECK(groups > 0, op, ": non-positive groups is not supported (got ", groups, ")");
  check_positive(op, "stride", s);
  check_positive(op, "dilation", d);
  const int64_t c_out = weight.size(0), c_in = x.size(1);
  const int2 k{weight.size(2), weight.size(3)};
  ACTORCH_CHECK(c_out % groups == 0, op, ": expected weight of size ", shape_str(weight.sizes()),
                " to have out_channels divisible by groups=", groups);
  ACTORCH_CHECK(weight.size(1) * groups == c_in, op, ": given groups=", groups, ", weight of size ",
                shape_str(weight.sizes()), ", expected input", shape_str(x.sizes()), " to have ",
                weight.size(1) * groups, " channels, but got ", c_in, " channels instead");
  if (bias.defined()) {
    ACTORCH_CHECK(bias.dim() == 1 && bias.size(0) == c_out, op, ": expected bias of shape [", c_out,
                  "] (out_channels), but got ", shape_str(bias.sizes()));
    ACTORCH_CHECK(bias.dtype() == x.dtype(), op, ": input type (", dtype_name(x.dtype()),
                  ") and bias type (", dtype_name(bias.dtype()), ") should be the same");
  }
  window2d g;
  g.planes = x.size(0) * c_in;
  if (padding.mode == "same") {
    ACTORCH_CHECK(s == int2(1), op,
                  ": padding='same' is not supported for strided "
                  "convolutions (stride ",
                  pair_str(s), ")");
    // The total d (k - 1) split as torch splits it: the odd one after.
    g.h = {x.size(2), x.size(2), k.h, 1, d.h * (k.h - 1) / 2, d.h};
    g.w = {x.size(3), x.size(3), k.w, 1, d.w * (k.w - 1) / 2, d.w};
  } else {
    int2 p = 0;
    if (padding.mode == "valid") {
      p = 0;
    } else {
      ACTORCH_CHECK(padding.mode.empty(), op, ": invalid padding string '", padding.mode,
                    "', should be one of {'valid', 'same'}");
      ACTORCH_CHECK(padding.values.size() == 1 || padding.values.size() == 2, op,
                    ": expected padding to be a single integer or one per spatial dim");
      p = padding.values.size() == 1 ? int2(padding.values[0])
                                     : int2(padding.values[0], padding.values[1]);
      ACTORCH_CHECK(p.h >= 0 && p.w >= 0, op, ": negative padding is not supported, got ",
                    pair_str(p));
    }
    g.h = conv_axis(x.size(2), k.h, s.h, p.h, d.h);
    g.w = conv_axis(x.size(3), k.w, s.w, p.w, d.w);
    const int64_t ph = x.size(2) + 2 * p.h, pw = x.size(3) + 2 * p.w;
    ACTORCH_CHECK(ph >= d.h * (k.h - 1) + 1 && pw >= d.w * (k.w - 1) + 1, op,
                  ": calculated padded input size per channel: (", ph, " x ", pw,
                  "). Kernel size: (", d.h * (k.h - 1) + 1, " x ", d.w * (k.w - 1) + 1,
                  "). Kernel size can't be greater than actual input size");
  }
  const int64_t n = x.size(0);
  const tensor cols = im2col(x, g); // (N, C_in * kh * kw, L)
  const int64_t per_group = weight.size(1) * k.h * k.w, L = g.h.out * g.w.out;
  tensor out;
  if (groups == 1)
    out = matmul(weight.reshape({c_out, per_group}), cols); // (N, C_out, L)
  else
    out = matmul(weight.reshape({groups, c_out / groups, per_group}),
                 cols.view({n, groups, per_group, L})); // (N, G, C_out / G, L)
  out = out.reshape({n, c_out, g.h.out, g.w.out});
  return bias.defined() ? out + bias.view({1, c_out, 1, 1}) : out;
}

} // namespace

tensor conv2d(const tensor& input, const tensor& weight, const tensor& bias, int2 stride,
              const conv_padding& padding, int2 dilation, int64_t groups) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "conv2d", unbatched);
  return unbatch(convolution("conv2d", x, weight, bias, stride, padding, dilation, groups),
                 unbatched);
}

tensor conv1d(const tensor& input, const tensor& weight, const tensor& bias, int64_t stride,
              const conv_padding& padding, int64_t dilation, int64_t groups) {
  bool unbatched = false;
  const tensor x = batched(input, 1, "conv1d", unbatched);
  check_defined("conv1d", {&weight});
  ACTORCH_CHECK(weight.dim() == 3,
                "conv1d: expected a weight of 3 dims (out_channels, "
                "in_channels / groups, kernel), but got shape ",
                shape_str(weight.sizes()));
  ACTORCH_CHECK(padding.values.size() <= 1, "conv1d: expected padding to be a single integer");
  // A length-L signal is a 1 x L image.
  const conv_padding p2 = padding.mode.empty() ? conv_padding(0, padding.values[0]) : padding;
  const tensor y = convolution("conv1d", x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, p2,
                               {1, dilation}, groups);
  return unbatch(y.squeeze(2), unbatched);
}

std::pair<tensor, tensor> max_pool2d_with_indices(const tensor& input, int2 k,
                                                  std::optional<int2> stride, int2 p, int2 d,
                                                  bool ceil_mode) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "max_pool2d", unbatched);
  auto [y, index] =
      max_pool(x, pool_geometry("max_pool2d", x, k, stride.value_or(k), p, d, ceil_mode));
  return {unbatch(y, unbatched), unbatch(index, unbatched)};
}

tensor max_pool2d(const tensor& input, int2 k, std::optional<int2> stride, int2 p, int2 d,
                  bool ceil_mode) {
  return max_pool2d_with_indices(input, k, stride, p, d, ceil_mode).first;
}

tensor avg_pool2d(const tensor& input, int2 k, std::optional<int2> stride, int2 p, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "avg_pool2d", unbatched);
  ACTORCH_CHECK(!divisor_override || *divisor_override != 0,
                "avg_pool2d: divisor must be not zero");
  const window2d g = pool_geometry("avg_pool2d", x, k, stride.value_or(k), p, 1, ceil_mode);
  return unbatch(avg_pool(x, g, {count_include_pad, divisor_override.value_or(0)}), unbatched);
}

tensor adaptive_avg_pool2d(const tensor& input, int2 output_size) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "adaptive_avg_pool2d", unbatched);
  return unbatch(avg_pool(x, adaptive_geometry("adaptive_avg_pool2d", x, output_size), {}),
                 unbatched);
}

tensor adaptive_max_pool2d(const tensor& input, int2 output_size) {
  bool unbatched = false;
  const tensor x = batched(input, 2, "adaptive_max_pool2d", unbatched);
  return unbatch(max_pool(x, adaptive_geometry("adaptive_max_pool2d", x, output_size)).first,
                 unbatched);
}

} // namespace actorch
