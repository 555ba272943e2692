// cat and stack: checks, result shape and dtype, then one copy_ of each input into its narrow()
// slice of the result (copy_ converts to the promoted dtype and handles any input layout).
#include "core/ops/shape_ops.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"

#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"

namespace actorch {

namespace {

// PyTorch's legacy rule: a 1-D tensor of shape [0] joins any cat, whatever the others' shapes.
bool is_legacy_empty(const tensor& t) {
  return t.dim() == 1 && t.size(0) == 0;
}

} // namespace

static tensor cat_untracked(const std::vector<tensor>& tensors, int64_t dim) {
  ACTORCH_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  dtype result = dtype::bool_;
  size_t ref = tensors.size(); // the first input that is not a legacy empty tensor
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tensor& t = tensors[i];
    ACTORCH_CHECK(t.defined(), "cat: the tensor at position ", i, " is undefined");
    ACTORCH_CHECK(t.device() == tensors[0].device(),
                  "cat: expected all tensors to be on the same device, but found at least two "
                  "devices, ",
                  tensors[0].device(), " and ", t.device(), " (the tensor at position ", i, ")");
    ACTORCH_CHECK(t.dim() > 0, "cat: the zero-dimensional tensor at position ", i,
                  " cannot be concatenated");
    result = i == 0 ? t.dtype() : promote_types(result, t.dtype());
    if (ref == tensors.size() && !is_legacy_empty(t))
      ref = i;
  }
  if (ref == tensors.size()) // only legacy empty tensors
    return empty({0}, {.dtype = result, .device = tensors[0].device()});

  const tensor& r = tensors[ref];
  const int64_t d = wrap_dim(dim, r.dim(), "cat");
  shape_t shape = r.sizes();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tensor& t = tensors[i];
    if (is_legacy_empty(t))
      continue;
    ACTORCH_CHECK(t.dim() == r.dim(),
                  "cat: tensors must have the same number of dims, but the "
                  "tensor at position ",
                  i, " has shape ", shape_str(t.sizes()), " and the tensor at position ", ref,
                  " has shape ", shape_str(r.sizes()));
    for (int64_t k = 0; k < r.dim(); ++k)
      ACTORCH_CHECK(k == d || t.size(k) == r.size(k),
                    "cat: sizes of tensors must match except "
                    "in dim ",
                    d, ": expected size ", r.size(k), " but got size ", t.size(k), " in dim ", k,
                    " for the tensor at position ", i, " (shape ", shape_str(t.sizes()),
                    "; the tensor at position ", ref, " has shape ", shape_str(r.sizes()), ")");
    total += t.size(d);
  }
  shape[size_t(d)] = total;
  tensor out = empty(shape, {.dtype = result, .device = r.device()});
  int64_t offset = 0;
  for (const tensor& t : tensors) {
    if (is_legacy_empty(t))
      continue;
    out.narrow(d, offset, t.size(d)).copy_(t);
    offset += t.size(d);
  }
  return out;
}

tensor cat(const std::vector<tensor>& tensors, int64_t dim) {
  const bool track = autograd::needs_grad(tensors);
  tensor out;
  {
    no_grad untracked;
    out = cat_untracked(tensors, dim);
  }
  if (!track)
    return out;
  std::vector<const tensor*> inputs;
  std::vector<shape_t> shapes;
  for (const tensor& t : tensors) {
    inputs.push_back(&t);
    shapes.push_back(t.sizes());
  }
  const int64_t d = wrap_dim(dim, out.dim(), "cat");
  autograd::record(out, "CatBackward0", inputs, {}, [shapes, d](const auto& g, const auto&) {
    // Each input's gradient is its slice of g; skipped legacy [0] inputs get an empty one.
    std::vector<tensor> grads;
    int64_t offset = 0;
    for (const shape_t& shape : shapes) {
      if (shape == shape_t{0} && g[0].dim() != 1) {
        grads.push_back(zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()}));
        continue;
      }
      grads.push_back(g[0].narrow(d, offset, shape[size_t(d)]));
      offset += shape[size_t(d)];
    }
    return grads;
  });
  return out;
}

tensor stack(const std::vector<tensor>& tensors, int64_t dim) {
  ACTORCH_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    ACTORCH_CHECK(tensors[i].defined(), "stack: the tensor at position ", i, " is undefined");
  const tensor& first = tensors[0];
  const int64_t d = wrap_dim(dim, first.dim() + 1, "stack");
  std::vector<tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    ACTORCH_CHECK(tensors[i].sizes() == first.sizes(),
                  "stack: expects each tensor to be equal "
                  "size, but got ",
                  shape_str(first.sizes()), " at position 0 and ", shape_str(tensors[i].sizes()),
                  " at position ", i);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

} // namespace actorch
