// Reductions: dim bookkeeping, dtype rules and layout choice here, the loops in
// kernels/cpu/reduce. Each op resolves its dims, picks a dense layout for the kernel (see
// Note [Reduction layouts]) and allocates a contiguous result of the reduced shape.
#include "core/ops/reduce.hpp"

#include <algorithm>
#include <optional>

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/index.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/reduce.hpp"
#include "kernels/cuda/reduce.hpp"

namespace actorch {

namespace kc = kernels::cpu;

namespace {

// Which dims a reduction folds, and what it leaves.
struct reduction {
  std::vector<bool> reduced; // per input dim
  shape_t out_shape;         // reduced dims dropped, or kept as 1 with keepdim
  int64_t kept_numel = 1;    // K: the number of outputs
  int64_t reduced_numel = 1; // R: the number of inputs folded into each output
};

// Resolves `dims` (negative allowed; empty means all) against t. A 0-dim tensor accepts dim 0
// and -1 and reduces to a 0-dim result, keepdim or not, as in PyTorch.
reduction plan_reduction(const tensor& t, const shape_t& dims, bool keepdim, const char* op) {
  const int64_t nd = t.dim();
  reduction r;
  r.reduced.assign(size_t(nd), dims.empty());
  std::vector<bool> seen(size_t(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, nd, op);
    ACTORCH_CHECK(!seen[size_t(w)], op, ": dim ", w, " appears multiple times in the list of dims ",
                  shape_str(dims));
    seen[size_t(w)] = true;
    if (nd > 0)
      r.reduced[size_t(w)] = true;
  }
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t s = t.sizes()[size_t(d)];
    if (r.reduced[size_t(d)]) {
      r.reduced_numel *= s;
      if (keepdim)
        r.out_shape.push_back(1);
    } else {
      r.kept_numel *= s;
      r.out_shape.push_back(s);
    }
  }
  return r;
}

// Throws naming `op` when a reduced dim has size 0 (max, min and their kin have no identity).
void check_nonempty_dims(const tensor& t, const reduction& r, const char* op) {
  for (int64_t d = 0; d < t.dim(); ++d)
    ACTORCH_CHECK(!r.reduced[size_t(d)] || t.sizes()[size_t(d)] > 0, op,
                  ": expected reduction dim ", d, " to have non-zero size (input shape ",
                  shape_str(t.sizes()), ")");
}

void check_floating(const tensor& t, const char* op) {
  ACTORCH_CHECK(t.is_floating_point(), op,
                ": could not infer output dtype. Input dtype must be floating point, got ",
                dtype_name(t.dtype()));
}

// Note [Reduction layouts]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The kernels take two dense layouts: rows, (K, R) with the kept dims first, where each output
// reduces one contiguous row; and columns, (R, K) with the reduced dims first, where each row
// of input is added into all K outputs at once (the bias gradient: sum over the batch of a
// contiguous (B, C) tensor). Both inner loops walk contiguous memory. We try the permutation
// kept-then-reduced, then reduced-then-kept, as views; when neither is contiguous (transposed
// in a mixed way, sliced with a step, expanded) the first is copied to contiguous memory.
// Flat indices within R follow the reduced dims in their original order in both layouts.
struct arranged {
  tensor in;
  bool cols = false;
};

arranged arrange(const tensor& t, const reduction& r) {
  shape_t kept, red;
  for (int64_t d = 0; d < t.dim(); ++d)
    (r.reduced[size_t(d)] ? red : kept).push_back(d);
  shape_t kept_first = kept;
  kept_first.insert(kept_first.end(), red.begin(), red.end());
  const tensor rows = t.permute(kept_first);
  if (rows.is_contiguous())
    return {rows, false};
  shape_t red_first = red;
  red_first.insert(red_first.end(), kept.begin(), kept.end());
  const tensor cols = t.permute(red_first);
  if (cols.is_contiguous())
    return {cols, true};
  return {rows.contiguous(), false};
}

tensor reduce_forward(kc::reduce_op op, const char* name, const tensor& t, const shape_t& dims,
                      bool keepdim, int64_t correction) {
  check_defined(name, {&t});
  if (op == kc::reduce_op::mean || op == kc::reduce_op::var || op == kc::reduce_op::std)
    check_floating(t, name);
  const reduction r = plan_reduction(t, dims, keepdim, name);
  if (op == kc::reduce_op::amax || op == kc::reduce_op::amin)
    check_nonempty_dims(t, r, name);
  tensor out =
      empty(r.out_shape, {.dtype = kc::reduce_out_dtype(op, t.dtype()), .device = t.device()});
  if (r.kept_numel == 0)
    return out;
  const arranged a = arrange(t, r);
  if (a.cols)
    ACTORCH_KERNEL(t.device(), reduce_cols, op, t.dtype(), a.in.data_ptr(), out.data_ptr(),
                   r.reduced_numel, r.kept_numel, correction);
  else
    ACTORCH_KERNEL(t.device(), reduce_rows, op, t.dtype(), a.in.data_ptr(), out.data_ptr(),
                   r.kept_numel, r.reduced_numel, correction);
  return out;
}

// max/min (values and indices) and argmax/argmin, over `dim` or, when absent, all elements.
values_indices arg_reduce_forward(bool is_max, bool want_values, const char* name, const tensor& t,
                                  std::optional<int64_t> dim, bool keepdim) {
  check_defined(name, {&t});
  const reduction r = plan_reduction(t, dim ? shape_t{*dim} : shape_t{}, keepdim, name);
  if (dim)
    check_nonempty_dims(t, r, name);
  else
    ACTORCH_CHECK(t.numel() > 0, name,
                  ": expected a non-empty tensor when reducing over all elements (input shape ",
                  shape_str(t.sizes()), "); specify the reduction dim with the dim argument");
  values_indices out;
  if (want_values)
    out.values = empty(r.out_shape, {.dtype = t.dtype(), .device = t.device()});
  out.indices = empty(r.out_shape, {.dtype = dtype::int64, .device = t.device()});
  if (r.kept_numel == 0)
    return out;
  const arranged a = arrange(t, r);
  void* values = want_values ? out.values.data_ptr() : nullptr;
  int64_t* indices = out.indices.data_ptr<int64_t>();
  if (a.cols)
    ACTORCH_KERNEL(t.device(), arg_reduce_cols, is_max, t.dtype(), a.in.data_ptr(), values, indices,
                   r.reduced_numel, r.kept_numel);
  else
    ACTORCH_KERNEL(t.device(), arg_reduce_rows, is_max, t.dtype(), a.in.data_ptr(), values, indices,
                   r.kept_numel, r.reduced_numel);
  return out;
}

// Backward of reductions. ----------------------------------------------------------------------

// The reduced dims of a reduction of t over `dims` (all when empty), in increasing order.
shape_t reduced_dims(const tensor& t, const shape_t& dims, const char* name) {
  const reduction r = plan_reduction(t, dims, true, name);
  shape_t out;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (r.reduced[size_t(d)])
      out.push_back(d);
  return out;
}

// g (the gradient of a reduction's output) broadcast back over the input's shape.
tensor expand_back(const tensor& g, const shape_t& in_shape, const shape_t& red, bool keepdim) {
  shape_t kept_shape = in_shape;
  for (int64_t d : red)
    kept_shape[size_t(d)] = 1;
  const tensor k = keepdim ? g : g.reshape(kept_shape);
  return k.expand(in_shape);
}

tensor reduce(kc::reduce_op op, const char* name, const tensor& t, const shape_t& dims,
              bool keepdim, int64_t correction = 0) {
  const bool track = autograd::needs_grad({&t}) && t.is_floating_point() &&
                     op != kc::reduce_op::any && op != kc::reduce_op::all;
  tensor out;
  {
    no_grad untracked;
    out = reduce_forward(op, name, t, dims, keepdim, correction);
  }
  if (!track)
    return out;
  const shape_t red = reduced_dims(t, dims, name);
  const shape_t in_shape = t.sizes();
  int64_t n = 1;
  for (int64_t d : red)
    n *= in_shape[size_t(d)];
  switch (op) {
  case kc::reduce_op::sum:
    autograd::record(out, "SumBackward0", {&t}, {}, [=](const auto& g, const auto&) {
      return std::vector<tensor>{expand_back(g[0], in_shape, red, keepdim)};
    });
    break;
  case kc::reduce_op::mean:
    autograd::record(out, "MeanBackward0", {&t}, {}, [=](const auto& g, const auto&) {
      return std::vector<tensor>{expand_back(g[0], in_shape, red, keepdim) / double(n)};
    });
    break;
  case kc::reduce_op::amax:
  case kc::reduce_op::amin:
    autograd::record(
        out, "AmaxAminBackward0", {&t}, {t, out.detach()}, [=](const auto& g, const auto& s) {
          // Ties share the gradient evenly.
          const tensor hit = eq(s[0], expand_back(s[1], in_shape, red, keepdim)).to(g[0].dtype());
          const tensor count = sum(hit, red, true);
          return std::vector<tensor>{expand_back(g[0], in_shape, red, keepdim) * hit / count};
        });
    break;
  case kc::reduce_op::var:
  case kc::reduce_op::std: {
    const bool is_std = op == kc::reduce_op::std;
    autograd::record(out, is_std ? "StdBackward0" : "VarBackward0", {&t}, {t, out.detach()},
                     [=](const auto& g, const auto& s) {
                       const tensor centered = s[0] - mean(s[0], red, true);
                       const double denom = double(std::max<int64_t>(n - correction, 0));
                       tensor grad = expand_back(g[0], in_shape, red, keepdim) * centered;
                       if (is_std)
                         return std::vector<tensor>{
                             grad / (expand_back(s[1], in_shape, red, keepdim) * denom)};
                       return std::vector<tensor>{grad * (2.0 / denom)};
                     });
    break;
  }
  default: break;
  }
  return out;
}

values_indices arg_reduce(bool is_max, bool want_values, const char* name, const tensor& t,
                          std::optional<int64_t> dim, bool keepdim) {
  const bool track = want_values && autograd::needs_grad({&t});
  values_indices out;
  {
    no_grad untracked;
    out = arg_reduce_forward(is_max, want_values, name, t, dim, keepdim);
  }
  if (!track)
    return out;
  const shape_t in_shape = t.sizes();
  if (!dim) {
    // max()/min() over everything: ties share the gradient evenly, like amax.
    autograd::record(out.values, is_max ? "MaxBackward0" : "MinBackward0", {&t},
                     {t, out.values.detach()}, [=](const auto& g, const auto& s) {
                       const tensor hit = eq(s[0], s[1]).to(g[0].dtype());
                       return std::vector<tensor>{g[0].expand(in_shape) * hit / sum(hit)};
                     });
    return out;
  }
  const int64_t d = wrap_dim(*dim, t.dim(), name);
  autograd::record(out.values, is_max ? "MaxBackward0" : "MinBackward0", {&t}, {out.indices},
                   [=](const auto& g, const auto& s) {
                     // The gradient goes to the element each value was taken from.
                     const tensor gk = keepdim || in_shape.empty() ? g[0] : g[0].unsqueeze(d);
                     const tensor ik = keepdim || in_shape.empty() ? s[0] : s[0].unsqueeze(d);
                     if (in_shape.empty())
                       return std::vector<tensor>{gk.clone()};
                     // ik comes from this op's own arg reduction: always in range.
                     return std::vector<tensor>{detail::scatter_add(
                         zeros(in_shape, {.dtype = gk.dtype(), .device = gk.device()}), d, ik, gk,
                         /*check_range=*/false)};
                   });
  return out;
}

} // namespace

tensor sum(const tensor& t) {
  return reduce(kc::reduce_op::sum, "sum()", t, {}, false);
}
tensor sum(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::sum, "sum()", t, dims, keepdim);
}

tensor mean(const tensor& t) {
  return reduce(kc::reduce_op::mean, "mean()", t, {}, false);
}
tensor mean(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::mean, "mean()", t, dims, keepdim);
}

tensor amax(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::amax, "amax()", t, dims, keepdim);
}
tensor amin(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::amin, "amin()", t, dims, keepdim);
}

tensor max(const tensor& t) {
  return arg_reduce(true, true, "max()", t, std::nullopt, false).values;
}
tensor min(const tensor& t) {
  return arg_reduce(false, true, "min()", t, std::nullopt, false).values;
}
values_indices max(const tensor& t, int64_t dim, bool keepdim) {
  return arg_reduce(true, true, "max()", t, dim, keepdim);
}
values_indices min(const tensor& t, int64_t dim, bool keepdim) {
  return arg_reduce(false, true, "min()", t, dim, keepdim);
}

tensor argmax(const tensor& t) {
  return arg_reduce(true, false, "argmax()", t, std::nullopt, false).indices;
}
tensor argmax(const tensor& t, int64_t dim, bool keepdim) {
  return arg_reduce(true, false, "argmax()", t, dim, keepdim).indices;
}
tensor argmin(const tensor& t) {
  return arg_reduce(false, false, "argmin()", t, std::nullopt, false).indices;
}
tensor argmin(const tensor& t, int64_t dim, bool keepdim) {
  return arg_reduce(false, false, "argmin()", t, dim, keepdim).indices;
}

tensor var(const tensor& t, bool unbiased) {
  return reduce(kc::reduce_op::var, "var()", t, {}, false, unbiased ? 1 : 0);
}
tensor var(const tensor& t, const shape_t& dims, bool unbiased, bool keepdim) {
  return reduce(kc::reduce_op::var, "var()", t, dims, keepdim, unbiased ? 1 : 0);
}
tensor var(const tensor& t, std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) {
  return var(t, shape_t(dims), unbiased, keepdim);
}
tensor std(const tensor& t, bool unbiased) {
  return reduce(kc::reduce_op::std, "std()", t, {}, false, unbiased ? 1 : 0);
}
tensor std(const tensor& t, const shape_t& dims, bool unbiased, bool keepdim) {
  return reduce(kc::reduce_op::std, "std()", t, dims, keepdim, unbiased ? 1 : 0);
}

tensor std(const tensor& t, std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) {
  return std(t, shape_t(dims), unbiased, keepdim);
}

tensor any(const tensor& t) {
  return reduce(kc::reduce_op::any, "any()", t, {}, false);
}
tensor any(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::any, "any()", t, dims, keepdim);
}
tensor all(const tensor& t) {
  return reduce(kc::reduce_op::all, "all()", t, {}, false);
}
tensor all(const tensor& t, const shape_t& dims, bool keepdim) {
  return reduce(kc::reduce_op::all, "all()", t, dims, keepdim);
}

// Tensor methods of this family. -----------------------------------------------------------------

tensor tensor::sum() const {
  return actorch::sum(*this);
}
tensor tensor::sum(const shape_t& dims, bool keepdim) const {
  return actorch::sum(*this, dims, keepdim);
}
tensor tensor::mean() const {
  return actorch::mean(*this);
}
tensor tensor::mean(const shape_t& dims, bool keepdim) const {
  return actorch::mean(*this, dims, keepdim);
}
tensor tensor::max() const {
  return actorch::max(*this);
}
values_indices tensor::max(int64_t dim, bool keepdim) const {
  return actorch::max(*this, dim, keepdim);
}
tensor tensor::min() const {
  return actorch::min(*this);
}
values_indices tensor::min(int64_t dim, bool keepdim) const {
  return actorch::min(*this, dim, keepdim);
}
tensor tensor::argmax() const {
  return actorch::argmax(*this);
}
tensor tensor::argmax(int64_t dim, bool keepdim) const {
  return actorch::argmax(*this, dim, keepdim);
}
tensor tensor::var(bool unbiased) const {
  return actorch::var(*this, unbiased);
}
tensor tensor::var(const shape_t& dims, bool unbiased, bool keepdim) const {
  return actorch::var(*this, dims, unbiased, keepdim);
}
tensor tensor::var(std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) const {
  return actorch::var(*this, shape_t(dims), unbiased, keepdim);
}
tensor tensor::std(bool unbiased) const {
  return actorch::std(*this, unbiased);
}
tensor tensor::std(const shape_t& dims, bool unbiased, bool keepdim) const {
  return actorch::std(*this, dims, unbiased, keepdim);
}
tensor tensor::std(std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) const {
  return actorch::std(*this, shape_t(dims), unbiased, keepdim);
}

} // namespace actorch
