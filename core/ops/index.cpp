// index_select, gather and scatter_add: dtype, rank and shape checks, index conversion to
// contiguous int64, and the bounds check of every index before kernels/cpu/index moves data.
// 0-dim operands are read as one-element vectors, as PyTorch does.
#include "core/ops/index.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"

#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/index.hpp"
#include "kernels/cuda/index.hpp"

namespace actorch {

namespace kc = kernels::cpu;

namespace {

tensor at_least_1d(const tensor& t) {
  return t.dim() == 0 ? t.unsqueeze(0) : t;
}

kc::strided_view to_view(const tensor& t, const char* op) {
  ACTORCH_CHECK(t.dim() <= kernels::kMaxDims, op, ": tensors with more than ", kernels::kMaxDims,
                " dims are not supported (shape ", shape_str(t.sizes()), ")");
  kc::strided_view v;
  v.ndim = int(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = t.sizes()[size_t(d)];
    v.strides[d] = t.strides()[size_t(d)];
  }
  return v;
}

void check_int64_index(const char* op, const tensor& index) {
  ACTORCH_CHECK(index.dtype() == dtype::int64, op, ": expected an int64 index but got ",
                dtype_name(index.dtype()), " (shape ", shape_str(index.sizes()), ")");
}

// index.size(d) <= other.size(d) for every d (except `skip`), naming both shapes.
void check_index_fits(const char* op, const tensor& index, const tensor& other,
                      const char* other_name, int64_t skip) {
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == skip)
      continue;
    ACTORCH_CHECK(index.size(d) <= other.size(d), op, ": index shape ", shape_str(index.sizes()),
                  " exceeds ", other_name, " shape ", shape_str(other.sizes()), " at dim ", d, " (",
                  index.size(d), " > ", other.size(d), ")");
  }
}

} // namespace

static tensor index_select_untracked(const tensor& t, int64_t dim, const tensor& index) {
  check_defined("index_select", {&t, &index});
  common_device("index_select", {&t, &index});
  ACTORCH_CHECK(index.dtype() == dtype::int64 || index.dtype() == dtype::int32,
                "index_select: expected an int64 or int32 index but got ",
                dtype_name(index.dtype()));
  ACTORCH_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D but got shape ",
                shape_str(index.sizes()));
  const int64_t n = index.numel();
  ACTORCH_CHECK(t.dim() > 0 || n == 1,
                "index_select: a 0-dim tensor takes exactly one index but got ", n);
  const tensor self = at_least_1d(t);
  const int64_t d = wrap_dim(dim, self.dim(), "index_select");
  const tensor idx = index.to(dtype::int64).contiguous();
  const int64_t size = self.size(d);
  ACTORCH_KERNEL(t.device(), check_index_range, "index_select", idx.data_ptr<int64_t>(), n, d,
                 size);

  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i)
    outer *= self.size(i);
  for (int64_t i = d + 1; i < self.dim(); ++i)
    inner *= self.size(i);
  shape_t shape = self.sizes();
  shape[size_t(d)] = n;
  tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  const tensor in = self.contiguous();
  ACTORCH_KERNEL(t.device(), index_select, int64_t(t.element_size()), in.data_ptr(), out.data_ptr(),
                 outer, size, inner, idx.data_ptr<int64_t>(), n);
  return t.dim() == 0 ? out.view({}) : out;
}

// check_range: false where the index has been checked already (a backward formula's index is
// its forward's, unchanged: saved tensors are version-checked), sparing the check's GPU sync.
static tensor gather_untracked(const tensor& t, int64_t dim, const tensor& index,
                               bool check_range) {
  check_defined("gather", {&t, &index});
  common_device("gather", {&t, &index});
  check_int64_index("gather", index);
  const tensor self = at_least_1d(t);
  const tensor idx = at_least_1d(index).contiguous();
  ACTORCH_CHECK(self.dim() == idx.dim(), "gather: index must have as many dims as the input (",
                self.dim(), ") but has ", idx.dim(), " (shapes ", shape_str(t.sizes()),
                " and index ", shape_str(index.sizes()), ")");
  const int64_t d = wrap_dim(dim, self.dim(), "gather");
  check_index_fits("gather", idx, self, "input", d);
  if (check_range)
    ACTORCH_KERNEL(t.device(), check_index_range, "gather", idx.data_ptr<int64_t>(), idx.numel(), d,
                   self.size(d));
  tensor out = empty(index.sizes(), {.dtype = t.dtype(), .device = t.device()});
  ACTORCH_KERNEL(t.device(), gather, int64_t(t.element_size()), self.data_ptr(),
                 to_view(self, "gather"), out.data_ptr(), idx.data_ptr<int64_t>(),
                 to_view(idx, "gather"), d);
  return out;
}

static tensor scatter_add_untracked(const tensor& t, int64_t dim, const tensor& index,
                                    const tensor& src, bool check_range) {
  check_defined("scatter_add", {&t, &index, &src});
  common_device("scatter_add", {&t, &index, &src});
  check_int64_index("scatter_add", index);
  ACTORCH_CHECK(src.dtype() == t.dtype(), "scatter_add: expected src to have the input's dtype ",
                dtype_name(t.dtype()), " but got ", dtype_name(src.dtype()));
  const tensor self = at_least_1d(t);
  const tensor idx = at_least_1d(index).contiguous();
  const tensor source = at_least_1d(src);
  ACTORCH_CHECK(self.dim() == idx.dim() && source.dim() == idx.dim(),
                "scatter_add: input, index and src must have the same number of dims but got "
                "shapes ",
                shape_str(t.sizes()), ", ", shape_str(index.sizes()), " and ",
                shape_str(src.sizes()));
  const int64_t d = wrap_dim(dim, self.dim(), "scatter_add");
  check_index_fits("scatter_add", idx, self, "input", d);
  check_index_fits("scatter_add", idx, source, "src", -1);
  if (check_range)
    ACTORCH_KERNEL(t.device(), check_index_range, "scatter_add", idx.data_ptr<int64_t>(),
                   idx.numel(), d, self.size(d));
  tensor out = self.clone();
  ACTORCH_KERNEL(t.device(), scatter_add, t.dtype(), out.data_ptr(), to_view(out, "scatter_add"),
                 source.data_ptr(), to_view(source, "scatter_add"), idx.data_ptr<int64_t>(),
                 to_view(idx, "scatter_add"), d);
  return t.dim() == 0 ? out.view({}) : out;
}

// Differentiable entry points. --------------------------------------------------------------------

tensor index_select(const tensor& t, int64_t dim, const tensor& index) {
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    out = index_select_untracked(t, dim, index);
  }
  if (track)
    autograd::record(out, "IndexSelectBackward0", {&t}, {index},
                     [shape = t.sizes(), dim](const auto& g, const auto& s) {
                       if (shape.empty())
                         return std::vector<tensor>{g[0].clone()};
                       // Scatter each selected slice back: the index, laid along dim and
                       // broadcast over the other dims, addresses every element of g.
                       const int64_t d = wrap_dim(dim, int64_t(shape.size()), "index_select");
                       shape_t idx_shape(shape.size(), 1);
                       idx_shape[size_t(d)] = s[0].numel();
                       const tensor idx =
                           s[0].to(dtype::int64).reshape(idx_shape).expand(g[0].sizes());
                       return std::vector<tensor>{detail::scatter_add(
                           zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()}), d, idx,
                           g[0], /*check_range=*/false)};
                     });
  return out;
}

namespace detail {

tensor gather(const tensor& t, int64_t dim, const tensor& index, bool check_range) {
  const bool track = autograd::needs_grad({&t});
  tensor out;
  {
    no_grad untracked;
    out = gather_untracked(t, dim, index, check_range);
  }
  if (track)
    autograd::record(out, "GatherBackward0", {&t}, {index},
                     [shape = t.sizes(), dim](const auto& g, const auto& s) {
                       return std::vector<tensor>{scatter_add(
                           zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()}), dim,
                           s[0], g[0], /*check_range=*/false)};
                     });
  return out;
}

tensor scatter_add(const tensor& t, int64_t dim, const tensor& index, const tensor& src,
                   bool check_range) {
  const bool track = autograd::needs_grad({&t, &src});
  tensor out;
  {
    no_grad untracked;
    out = scatter_add_untracked(t, dim, index, src, check_range);
  }
  if (track)
    autograd::record(
        out, "ScatterAddBackward0", {&t, &src}, {index}, [dim](const auto& g, const auto& s) {
          return std::vector<tensor>{g[0], gather(g[0], dim, s[0], /*check_range=*/false)};
        });
  return out;
}

} // namespace detail

tensor gather(const tensor& t, int64_t dim, const tensor& index) {
  return detail::gather(t, dim, index, /*check_range=*/true);
}

tensor scatter_add(const tensor& t, int64_t dim, const tensor& index, const tensor& src) {
  return detail::scatter_add(t, dim, index, src, /*check_range=*/true);
}

tensor tensor::index_select(int64_t dim, const tensor& index) const {
  return actorch::index_select(*this, dim, index);
}

tensor tensor::gather(int64_t dim, const tensor& index) const {
  return actorch::gather(*this, dim, index);
}

} // namespace actorch
