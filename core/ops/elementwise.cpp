// Elementwise ops: type promotion and broadcasting here, the loops in kernels/cpu/elementwise.
#include "core/ops/elementwise.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/copy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/copy.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace actorch {

namespace kc = kernels::cpu;

// Type promotion. ------------------------------------------------------------------------------

namespace {

// Note [Type promotion]
// ~~~~~~~~~~~~~~~~~~~~~
// PyTorch ranks operands in three tiers: tensors with dims, 0-dim tensors, and wrapped numbers
// (C++ scalars, which count as bool, int64 or float32). A lower tier only matters when it is of
// a higher category (bool < integral < floating) than the tiers above it, so `int32 tensor + 2`
// stays int32, `int32 tensor + 2.5` is float32, and `float16 tensor + float64 0-dim` is float16.
struct promotion {
  std::optional<dtype> dims, zero_dim, wrapped;

  static void merge(std::optional<dtype>& slot, dtype t) {
    slot = slot ? promote_types(*slot, t) : t;
  }
  void add(const tensor& t) { merge(t.dim() == 0 ? zero_dim : dims, t.dtype()); }
  void add(const scalar& s) { merge(wrapped, s.default_dtype()); }

  static std::optional<dtype> combine(std::optional<dtype> higher, std::optional<dtype> lower) {
    if (!higher)
      return lower;
    if (!lower || is_floating_point(*higher))
      return higher;
    if (*higher == dtype::bool_ || is_floating_point(*lower))
      return promote_types(*higher, *lower);
    return higher;
  }
  dtype result() const { return combine(dims, combine(zero_dim, wrapped)).value(); }
};

// Whether a result of dtype `from` may be written into a tensor of dtype `to` (torch.can_cast).
bool can_cast(dtype from, dtype to) {
  if (is_floating_point(from) && !is_floating_point(to))
    return false;
  if (from != dtype::bool_ && to == dtype::bool_)
    return false;
  return true;
}

void check_cast(dtype from, const tensor& out, const char* op) {
  ACTORCH_CHECK(can_cast(from, out.dtype()), op, ": result type ", dtype_name(from),
                " can't be cast to the desired output type ", dtype_name(out.dtype()));
}

const char* binary_name(kc::binary_op op) {
  switch (op) {
  case kc::binary_op::add: return "add";
  case kc::binary_op::sub: return "sub";
  case kc::binary_op::mul: return "mul";
  case kc::binary_op::div: return "div";
  case kc::binary_op::pow: return "pow";
  case kc::binary_op::maximum: return "maximum";
  case kc::binary_op::minimum: return "minimum";
  case kc::binary_op::eq: return "eq";
  case kc::binary_op::ne: return "ne";
  case kc::binary_op::lt: return "lt";
  case kc::binary_op::le: return "le";
  case kc::binary_op::gt: return "gt";
  case kc::binary_op::ge: return "ge";
  }
  return "binary op";
}

// The dtype a binary op computes in, given the promoted dtype of its operands.
dtype compute_dtype(kc::binary_op op, dtype promoted) {
  const char* name = binary_name(op);
  if (op == kc::binary_op::div && !is_floating_point(promoted))
    return dtype::float32; // true division
  if (promoted == dtype::bool_) {
    ACTORCH_CHECK(op != kc::binary_op::sub, name,
                  ": subtraction of bool tensors is not supported; use logical_xor or ~ instead");
    if (op == kc::binary_op::pow)
      return dtype::int64;
  }
  return promoted;
}

tensor binary_out_of_place(kc::binary_op op, const tensor& a, const tensor& b, dtype promoted,
                           const scalar& alpha) {
  const char* name = binary_name(op);
  check_defined(name, {&a, &b});
  const tensor a_on = scalar_to_device(a, b.device()), b_on = scalar_to_device(b, a.device());
  const device dev = common_device(name, {&a_on, &b_on});
  const dtype t = compute_dtype(op, promoted);
  ACTORCH_CHECK(alpha.type() != scalar::kind::floating || is_floating_point(t), name,
                ": for integral input tensors, alpha must not be a floating point number (got ",
                alpha.to_double(), ")");
  const shape_t shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const tensor ac = a_on.to(t), bc = b_on.to(t);
  tensor out = empty(shape, {.dtype = kc::is_comparison(op) ? dtype::bool_ : t, .device = dev});
  ACTORCH_KERNEL(dev, binary, op, t, make_loop<3>(out, {&ac, &bc}), alpha);
  return out;
}

tensor& binary_in_place(kc::binary_op op, tensor& self, const tensor& other, dtype promoted,
                        const scalar& alpha) {
  const char* name = binary_name(op);
  check_defined(name, {&self, &other});
  const tensor other_on = scalar_to_device(other, self.device());
  const device dev = common_device(name, {&self, &other_on});
  const dtype t = compute_dtype(op, promoted);
  check_cast(t, self, name);
  const shape_t shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  ACTORCH_CHECK(shape == self.sizes(), name, "_: the result's shape ", shape_str(shape),
                " differs from the in-place target's shape ", shape_str(self.sizes()));
  check_writable(self, name);
  autograd::check_in_place(self, name, {&other});
  // Compute in the target's dtype (the cast check above makes this lossless in category).
  const tensor oc = unaliased_input(self, other_on.to(self.dtype()));
  ACTORCH_KERNEL(dev, binary, op, self.dtype(), make_loop<3>(self, {&self, &oc}), alpha);
  return self;
}

// Backward formulas of the binary ops (forward/backward side by side, STYLE.md). Gradients are
// summed back over broadcast dims by sum_to; the engine casts them to each input's dtype.
void record_binary(kc::binary_op op, tensor& out, const tensor& a, const tensor& b,
                   const scalar& alpha) {
  using autograd::sum_to;
  const shape_t sa = a.sizes(), sb = b.sizes();
  const double al = alpha.to_double();
  switch (op) {
  case kc::binary_op::add:
    autograd::record(out, "AddBackward0", {&a, &b}, {}, [sa, sb, al](const auto& g, const auto&) {
      return std::vector<tensor>{sum_to(g[0], sa), sum_to(al == 1 ? g[0] : g[0] * al, sb)};
    });
    return;
  case kc::binary_op::sub:
    autograd::record(out, "SubBackward0", {&a, &b}, {}, [sa, sb, al](const auto& g, const auto&) {
      return std::vector<tensor>{sum_to(g[0], sa), sum_to(g[0] * -al, sb)};
    });
    return;
  case kc::binary_op::mul:
    autograd::record(out, "MulBackward0", {&a, &b}, {a, b}, [sa, sb](const auto& g, const auto& s) {
      return std::vector<tensor>{sum_to(g[0] * s[1], sa), sum_to(g[0] * s[0], sb)};
    });
    return;
  case kc::binary_op::div:
    autograd::record(out, "DivBackward0", {&a, &b}, {a, b}, [sa, sb](const auto& g, const auto& s) {
      return std::vector<tensor>{sum_to(g[0] / s[1], sa), sum_to(-g[0] * s[0] / (s[1] * s[1]), sb)};
    });
    return;
  case kc::binary_op::pow:
    autograd::record(out, "PowBackward0", {&a, &b}, {a, b, out.detach()},
                     [sa, sb](const auto& g, const auto& s) {
                       // d/db a^b = a^b log a, taken as 0 where a == 0 (PyTorch's convention).
                       const tensor log_a = where(s[0].eq(0), scalar(0.0), log(s[0]));
                       return std::vector<tensor>{sum_to(g[0] * s[1] * pow(s[0], s[1] - 1), sa),
                                                  sum_to(g[0] * s[2] * log_a, sb)};
                     });
    return;
  case kc::binary_op::maximum:
  case kc::binary_op::minimum: {
    const bool is_max = op == kc::binary_op::maximum;
    autograd::record(
        out, is_max ? "MaximumBackward0" : "MinimumBackward0", {&a, &b}, {a, b},
        [sa, sb, is_max](const auto& g, const auto& s) {
          // Ties split the gradient evenly, as torch.maximum's backward does.
          const tensor wins = (is_max ? gt(s[0], s[1]) : lt(s[0], s[1]));
          const tensor share = wins.to(g[0].dtype()) + eq(s[0], s[1]).to(g[0].dtype()) * 0.5;
          return std::vector<tensor>{sum_to(g[0] * share, sa), sum_to(g[0] * (1 - share), sb)};
        });
    return;
  }
  default: return; // comparisons: bool results carry no gradient
  }
}

void record_binary_scalar(kc::binary_op op, tensor& out, const tensor& a, const scalar& b) {
  const double v = b.to_double();
  switch (op) {
  case kc::binary_op::add:
  case kc::binary_op::sub:
    autograd::record(out, op == kc::binary_op::add ? "AddBackward0" : "SubBackward0", {&a}, {},
                     [](const auto& g, const auto&) { return std::vector<tensor>{g[0]}; });
    return;
  case kc::binary_op::mul:
    autograd::record(out, "MulBackward0", {&a}, {},
                     [v](const auto& g, const auto&) { return std::vector<tensor>{g[0] * v}; });
    return;
  case kc::binary_op::div:
    autograd::record(out, "DivBackward0", {&a}, {},
                     [v](const auto& g, const auto&) { return std::vector<tensor>{g[0] / v}; });
    return;
  case kc::binary_op::pow:
    autograd::record(out, "PowBackward0", {&a}, {a}, [v](const auto& g, const auto& s) {
      return std::vector<tensor>{v == 0 ? zeros_like(g[0]) : g[0] * v * pow(s[0], v - 1)};
    });
    return;
  default: return;
  }
}

tensor binary(kc::binary_op op, const tensor& a, const tensor& b, const scalar& alpha = 1) {
  check_defined(binary_name(op), {&a, &b});
  const bool track = autograd::needs_grad({&a, &b});
  tensor out;
  {
    no_grad untracked;
    out = binary_out_of_place(op, a, b, result_type(a, b), alpha);
  }
  if (track)
    record_binary(op, out, a, b, alpha);
  return out;
}

tensor binary(kc::binary_op op, const tensor& a, const scalar& b) {
  check_defined(binary_name(op), {&a});
  const bool track = autograd::needs_grad({&a});
  const dtype t = result_type(a, b);
  tensor out;
  {
    no_grad untracked;
    out = binary_out_of_place(op, a, scalar_tensor(b, {.dtype = t, .device = a.device()}), t, 1);
  }
  if (track)
    record_binary_scalar(op, out, a, b);
  return out;
}

void record_unary(kc::unary_op op, const char* name, tensor& out, const tensor& t) {
  using fn = autograd::function_node::backward_fn;
  // Formulas in terms of the input (x) or the output (y), whichever is cheaper.
  const tensor y = out.detach();
  std::vector<tensor> saved;
  fn f;
  switch (op) {
  case kc::unary_op::neg:
    f = [](const auto& g, const auto&) { return std::vector<tensor>{-g[0]}; };
    break;
  case kc::unary_op::abs:
    saved = {t};
    f = [](const auto& g, const auto& s) {
      return std::vector<tensor>{g[0] * (gt(s[0], zeros_like(s[0])).to(g[0].dtype()) -
                                         lt(s[0], zeros_like(s[0])).to(g[0].dtype()))};
    };
    break;
  case kc::unary_op::exp:
    saved = {y};
    f = [](const auto& g, const auto& s) { return std::vector<tensor>{g[0] * s[0]}; };
    break;
  case kc::unary_op::log:
    saved = {t};
    f = [](const auto& g, const auto& s) { return std::vector<tensor>{g[0] / s[0]}; };
    break;
  case kc::unary_op::sqrt:
    saved = {y};
    f = [](const auto& g, const auto& s) { return std::vector<tensor>{g[0] / (s[0] * 2)}; };
    break;
  case kc::unary_op::relu:
    saved = {y};
    f = [](const auto& g, const auto& s) {
      return std::vector<tensor>{where(s[0].gt(0), g[0], scalar(0.0))};
    };
    break;
  case kc::unary_op::sigmoid:
    saved = {y};
    f = [](const auto& g, const auto& s) { return std::vector<tensor>{g[0] * s[0] * (1 - s[0])}; };
    break;
  case kc::unary_op::tanh:
    saved = {y};
    f = [](const auto& g, const auto& s) { return std::vector<tensor>{g[0] * (1 - s[0] * s[0])}; };
    break;
  default: return;
  }
  // torch's node name: "exp" records ExpBackward0.
  std::string node_name = std::string(name) + "Backward0";
  node_name[0] = char(std::toupper(static_cast<unsigned char>(node_name[0])));
  autograd::record(out, node_name.c_str(), {&t}, std::move(saved), std::move(f));
}

tensor unary(kc::unary_op op, const char* name, const tensor& t, bool floating_result) {
  check_defined(name, {&t});
  dtype out_t = t.dtype();
  if (floating_result && !is_floating_point(out_t))
    out_t = dtype::float32;
  ACTORCH_CHECK(out_t != dtype::bool_, name, ": bool tensors are not supported");
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    const tensor in = t.to(out_t);
    out = empty(t.sizes(), {.dtype = out_t, .device = t.device()});
    ACTORCH_KERNEL(t.device(), unary, op, out_t, make_loop<2>(out, {&in}));
  }
  if (track)
    record_unary(op, name, out, t);
  return out;
}

tensor& unary_(kc::unary_op op, const char* name, tensor& t, bool floating_result) {
  check_defined(name, {&t});
  ACTORCH_CHECK(!floating_result || t.is_floating_point(), name,
                "_: result type float32 can't be cast to the desired output type ",
                dtype_name(t.dtype()));
  ACTORCH_CHECK(t.dtype() != dtype::bool_, name, ": bool tensors are not supported");
  check_writable(t, name);
  ACTORCH_KERNEL(t.device(), unary, op, t.dtype(), make_loop<2>(t, {&t}));
  return t;
}

} // namespace

dtype result_type(const tensor& a, const tensor& b) {
  promotion p;
  p.add(a);
  p.add(b);
  return p.result();
}

dtype result_type(const tensor& a, const scalar& b) {
  promotion p;
  p.add(a);
  p.add(b);
  return p.result();
}

// Binary ops. ----------------------------------------------------------------------------------

tensor add(const tensor& a, const tensor& b, const scalar& alpha) {
  return binary(kc::binary_op::add, a, b, alpha);
}
tensor sub(const tensor& a, const tensor& b, const scalar& alpha) {
  return binary(kc::binary_op::sub, a, b, alpha);
}
tensor mul(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::mul, a, b);
}
tensor div(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::div, a, b);
}
tensor pow(const tensor& base, const tensor& exponent) {
  return binary(kc::binary_op::pow, base, exponent);
}
tensor pow(const tensor& base, const scalar& exponent) {
  return binary(kc::binary_op::pow, base, exponent);
}
tensor maximum(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::maximum, a, b);
}
tensor minimum(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::minimum, a, b);
}
tensor eq(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::eq, a, b);
}
tensor ne(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::ne, a, b);
}
tensor lt(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::lt, a, b);
}
tensor le(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::le, a, b);
}
tensor gt(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::gt, a, b);
}
tensor ge(const tensor& a, const tensor& b) {
  return binary(kc::binary_op::ge, a, b);
}

// Unary ops. -----------------------------------------------------------------------------------

tensor neg(const tensor& t) {
  return unary(kc::unary_op::neg, "neg", t, false);
}
tensor abs(const tensor& t) {
  return unary(kc::unary_op::abs, "abs", t, false);
}
tensor exp(const tensor& t) {
  return unary(kc::unary_op::exp, "exp", t, true);
}
tensor log(const tensor& t) {
  return unary(kc::unary_op::log, "log", t, true);
}
tensor sqrt(const tensor& t) {
  return unary(kc::unary_op::sqrt, "sqrt", t, true);
}
tensor sigmoid(const tensor& t) {
  return unary(kc::unary_op::sigmoid, "sigmoid", t, true);
}
tensor tanh(const tensor& t) {
  return unary(kc::unary_op::tanh, "tanh", t, true);
}
tensor relu(const tensor& t) {
  return unary(kc::unary_op::relu, "relu", t, false);
}

namespace {
dtype clamp_dtype(const tensor& t, const std::optional<scalar>& lo,
                  const std::optional<scalar>& hi) {
  check_defined("clamp", {&t});
  ACTORCH_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  promotion p;
  p.add(t);
  if (lo)
    p.add(*lo);
  if (hi)
    p.add(*hi);
  const dtype r = p.result();
  ACTORCH_CHECK(r != dtype::bool_, "clamp: bool tensors are not supported");
  return r;
}
} // namespace

tensor clamp(const tensor& t, const std::optional<scalar>& lo, const std::optional<scalar>& hi) {
  const dtype r = clamp_dtype(t, lo, hi);
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    const tensor in = t.to(r);
    out = empty(t.sizes(), {.dtype = r, .device = t.device()});
    ACTORCH_KERNEL(t.device(), unary, kc::unary_op::clamp, r, make_loop<2>(out, {&in}),
                   lo ? &*lo : nullptr, hi ? &*hi : nullptr);
  }
  if (track)
    autograd::record(out, "ClampBackward0", {&t}, {t}, [lo, hi](const auto& g, const auto& s) {
      // The gradient passes where the input lies within [min, max].
      tensor pass = ones_like(s[0], {.dtype = dtype::bool_});
      if (lo)
        pass = where(s[0].ge(*lo), pass, false);
      if (hi)
        pass = where(s[0].le(*hi), pass, false);
      return std::vector<tensor>{where(pass, g[0], scalar(0.0))};
    });
  return out;
}

// where and masked_fill. -----------------------------------------------------------------------

tensor where(const tensor& cond, const tensor& a, const tensor& b) {
  check_defined("where", {&cond, &a, &b});
  const tensor a_on = scalar_to_device(a, cond.device()), b_on = scalar_to_device(b, cond.device());
  const device dev = common_device("where", {&cond, &a_on, &b_on});
  ACTORCH_CHECK(cond.dtype() == dtype::bool_, "where: expected a bool condition but got ",
                dtype_name(cond.dtype()));
  const shape_t shape =
      broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const dtype t = result_type(a, b);
  const bool track = autograd::needs_grad({&a, &b});
  tensor out;
  {
    no_grad untracked;
    const tensor ac = a_on.to(t), bc = b_on.to(t);
    out = empty(shape, {.dtype = t, .device = dev});
    ACTORCH_KERNEL(dev, where, t, make_loop<4>(out, {&cond, &ac, &bc}));
  }
  if (track)
    autograd::record(out, "WhereBackward0", {&a, &b}, {cond},
                     [sa = a.sizes(), sb = b.sizes()](const auto& g, const auto& s) {
                       using autograd::sum_to;
                       return std::vector<tensor>{sum_to(where(s[0], g[0], scalar(0.0)), sa),
                                                  sum_to(where(s[0], scalar(0.0), g[0]), sb)};
                     });
  return out;
}

tensor where(const tensor& cond, const tensor& a, const scalar& b) {
  check_defined("where", {&a});
  return where(cond, a, scalar_tensor(b, {.dtype = result_type(a, b), .device = a.device()}));
}

tensor where(const tensor& cond, const scalar& a, const tensor& b) {
  check_defined("where", {&b});
  return where(cond, scalar_tensor(a, {.dtype = result_type(b, a), .device = b.device()}), b);
}

tensor masked_fill(const tensor& t, const tensor& mask, const scalar& value) {
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    out = t.clone().masked_fill_(mask, value);
  }
  if (track)
    autograd::record(out, "MaskedFillBackward0", {&t}, {mask}, [](const auto& g, const auto& s) {
      return std::vector<tensor>{g[0].masked_fill(s[0], 0)};
    });
  return out;
}

// Comparisons of whole tensors. ----------------------------------------------------------------

bool equal(const tensor& a, const tensor& b) {
  check_defined("equal", {&a, &b});
  if (a.sizes() != b.sizes())
    return false;
  const tensor same = eq(a, b).cpu().contiguous();
  const bool* p = same.data_ptr<bool>();
  return std::all_of(p, p + same.numel(), [](bool v) { return v; });
}

bool allclose(const tensor& a, const tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("allclose", {&a, &b});
  const shape_t shape = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  const tensor ad = a.expand(shape).to(dtype::float64).cpu().contiguous();
  const tensor bd = b.expand(shape).to(dtype::float64).cpu().contiguous();
  const double* pa = ad.data_ptr<double>();
  const double* pb = bd.data_ptr<double>();
  for (int64_t i = 0; i < ad.numel(); ++i) {
    const double x = pa[i], y = pb[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (!(equal_nan && std::isnan(x) && std::isnan(y)))
        return false;
    } else if (x != y && !(std::abs(x - y) <= atol + rtol * std::abs(y))) {
      return false;
    }
  }
  return true;
}

// Tensor methods and operators of this family. --------------------------------------------------

namespace {
using bop = kc::binary_op;
tensor& in_place(bop op, tensor& self, const tensor& other, const scalar& alpha = 1) {
  check_defined(binary_name(op), {&self, &other});
  return binary_in_place(op, self, other, result_type(self, other), alpha);
}
tensor& in_place(bop op, tensor& self, const scalar& other) {
  check_defined(binary_name(op), {&self});
  const dtype t = result_type(self, other);
  return binary_in_place(op, self, scalar_tensor(other, {.dtype = t, .device = self.device()}), t,
                         1);
}
} // namespace

tensor tensor::add(const tensor& o, const scalar& alpha) const {
  return actorch::add(*this, o, alpha);
}
tensor tensor::add(const scalar& o) const {
  return binary(bop::add, *this, o);
}
tensor tensor::sub(const tensor& o, const scalar& alpha) const {
  return actorch::sub(*this, o, alpha);
}
tensor tensor::sub(const scalar& o) const {
  return binary(bop::sub, *this, o);
}
tensor tensor::mul(const tensor& o) const {
  return actorch::mul(*this, o);
}
tensor tensor::mul(const scalar& o) const {
  return binary(bop::mul, *this, o);
}
tensor tensor::div(const tensor& o) const {
  return actorch::div(*this, o);
}
tensor tensor::div(const scalar& o) const {
  return binary(bop::div, *this, o);
}
tensor tensor::pow(const tensor& e) const {
  return actorch::pow(*this, e);
}
tensor tensor::pow(const scalar& e) const {
  return actorch::pow(*this, e);
}
tensor tensor::neg() const {
  return actorch::neg(*this);
}
tensor tensor::abs() const {
  return actorch::abs(*this);
}
tensor tensor::exp() const {
  return actorch::exp(*this);
}
tensor tensor::log() const {
  return actorch::log(*this);
}
tensor tensor::sqrt() const {
  return actorch::sqrt(*this);
}
tensor tensor::relu() const {
  return actorch::relu(*this);
}
tensor tensor::sigmoid() const {
  return actorch::sigmoid(*this);
}
tensor tensor::tanh() const {
  return actorch::tanh(*this);
}
tensor tensor::clamp(const scalar& lo, const scalar& hi) const {
  return actorch::clamp(*this, lo, hi);
}
tensor tensor::clamp_min(const scalar& lo) const {
  return actorch::clamp(*this, lo, std::nullopt);
}
tensor tensor::clamp_max(const scalar& hi) const {
  return actorch::clamp(*this, std::nullopt, hi);
}
tensor tensor::eq(const tensor& o) const {
  return actorch::eq(*this, o);
}
tensor tensor::eq(const scalar& o) const {
  return binary(bop::eq, *this, o);
}
tensor tensor::ne(const tensor& o) const {
  return actorch::ne(*this, o);
}
tensor tensor::ne(const scalar& o) const {
  return binary(bop::ne, *this, o);
}
tensor tensor::lt(const tensor& o) const {
  return actorch::lt(*this, o);
}
tensor tensor::lt(const scalar& o) const {
  return binary(bop::lt, *this, o);
}
tensor tensor::le(const tensor& o) const {
  return actorch::le(*this, o);
}
tensor tensor::le(const scalar& o) const {
  return binary(bop::le, *this, o);
}
tensor tensor::gt(const tensor& o) const {
  return actorch::gt(*this, o);
}
tensor tensor::gt(const scalar& o) const {
  return binary(bop::gt, *this, o);
}
tensor tensor::ge(const tensor& o) const {
  return actorch::ge(*this, o);
}
tensor tensor::ge(const scalar& o) const {
  return binary(bop::ge, *this, o);
}

tensor& tensor::add_(const tensor& o, const scalar& alpha) {
  return in_place(bop::add, *this, o, alpha);
}
tensor& tensor::add_(const scalar& o) {
  return in_place(bop::add, *this, o);
}
tensor& tensor::sub_(const tensor& o, const scalar& alpha) {
  return in_place(bop::sub, *this, o, alpha);
}
tensor& tensor::sub_(const scalar& o) {
  return in_place(bop::sub, *this, o);
}
tensor& tensor::mul_(const tensor& o) {
  return in_place(bop::mul, *this, o);
}
tensor& tensor::mul_(const scalar& o) {
  return in_place(bop::mul, *this, o);
}
tensor& tensor::div_(const tensor& o) {
  return in_place(bop::div, *this, o);
}
tensor& tensor::div_(const scalar& o) {
  return in_place(bop::div, *this, o);
}
tensor& tensor::pow_(const scalar& e) {
  return in_place(bop::pow, *this, e);
}
tensor& tensor::neg_() {
  return unary_(kc::unary_op::neg, "neg", *this, false);
}
tensor& tensor::abs_() {
  return unary_(kc::unary_op::abs, "abs", *this, false);
}
tensor& tensor::exp_() {
  return unary_(kc::unary_op::exp, "exp", *this, true);
}
tensor& tensor::log_() {
  return unary_(kc::unary_op::log, "log", *this, true);
}
tensor& tensor::sqrt_() {
  return unary_(kc::unary_op::sqrt, "sqrt", *this, true);
}
tensor& tensor::relu_() {
  return unary_(kc::unary_op::relu, "relu", *this, false);
}
tensor& tensor::sigmoid_() {
  return unary_(kc::unary_op::sigmoid, "sigmoid", *this, true);
}
tensor& tensor::tanh_() {
  return unary_(kc::unary_op::tanh, "tanh", *this, true);
}

tensor& tensor::clamp_(const scalar& lo, const scalar& hi) {
  check_cast(clamp_dtype(*this, lo, hi), *this, "clamp_");
  check_writable(*this, "clamp_");
  ACTORCH_KERNEL(device(), unary, kc::unary_op::clamp, dtype(), make_loop<2>(*this, {this}), &lo,
                 &hi);
  return *this;
}

tensor& tensor::fill_(const scalar& value) {
  check_defined("fill_", {this});
  check_writable(*this, "fill_");
  ACTORCH_KERNEL(device(), fill, dtype(), make_loop<1>(*this, {}), value);
  return *this;
}

tensor& tensor::zero_() {
  return fill_(0);
}

tensor& tensor::masked_fill_(const tensor& mask, const scalar& value) {
  check_defined("masked_fill_", {this, &mask});
  common_device("masked_fill_", {this, &mask});
  ACTORCH_CHECK(mask.dtype() == dtype::bool_, "masked_fill_: expected a bool mask but got ",
                dtype_name(mask.dtype()));
  ACTORCH_CHECK(broadcast_shapes(sizes(), mask.sizes(), "masked_fill_") == sizes(),
                "masked_fill_: mask of shape ", shape_str(mask.sizes()),
                " cannot be broadcast to the tensor's shape ", shape_str(sizes()));
  ACTORCH_CHECK(value.is_floating_point() <= is_floating_point(), "masked_fill_: value ",
                value.to_double(), " is floating point but the tensor is ", dtype_name(dtype()));
  check_writable(*this, "masked_fill_");
  autograd::check_in_place(*this, "masked_fill_", {&mask});
  const tensor m = unaliased_input(*this, mask);
  ACTORCH_KERNEL(device(), masked_fill, dtype(), make_loop<2>(*this, {&m}), value);
  return *this;
}

tensor tensor::masked_fill(const tensor& mask, const scalar& value) const {
  return actorch::masked_fill(*this, mask, value);
}

tensor operator+(const tensor& a, const tensor& b) {
  return add(a, b);
}
tensor operator-(const tensor& a, const tensor& b) {
  return sub(a, b);
}
tensor operator*(const tensor& a, const tensor& b) {
  return mul(a, b);
}
tensor operator/(const tensor& a, const tensor& b) {
  return div(a, b);
}
tensor operator+(const tensor& a, const scalar& b) {
  return a.add(b);
}
tensor operator-(const tensor& a, const scalar& b) {
  return a.sub(b);
}
tensor operator*(const tensor& a, const scalar& b) {
  return a.mul(b);
}
tensor operator/(const tensor& a, const scalar& b) {
  return a.div(b);
}
tensor operator+(const scalar& a, const tensor& b) {
  return b.add(a);
}
tensor operator-(const scalar& a, const tensor& b) {
  check_defined("sub", {&b});
  const dtype t = result_type(b, a);
  return sub(scalar_tensor(a, {.dtype = t, .device = b.device()}), b);
}
tensor operator*(const scalar& a, const tensor& b) {
  return b.mul(a);
}
tensor operator/(const scalar& a, const tensor& b) {
  check_defined("div", {&b});
  const dtype t = result_type(b, a);
  return div(scalar_tensor(a, {.dtype = t, .device = b.device()}), b);
}
tensor operator-(const tensor& a) {
  return neg(a);
}
tensor& operator+=(tensor& a, const tensor& b) {
  return a.add_(b);
}
tensor& operator-=(tensor& a, const tensor& b) {
  return a.sub_(b);
}
tensor& operator*=(tensor& a, const tensor& b) {
  return a.mul_(b);
}
tensor& operator/=(tensor& a, const tensor& b) {
  return a.div_(b);
}
tensor& operator+=(tensor& a, const scalar& b) {
  return a.add_(b);
}
tensor& operator-=(tensor& a, const scalar& b) {
  return a.sub_(b);
}
tensor& operator*=(tensor& a, const scalar& b) {
  return a.mul_(b);
}
tensor& operator/=(tensor& a, const scalar& b) {
  return a.div_(b);
}

} // namespace actorch
