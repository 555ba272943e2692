// actorch::tensor: a strided view (sizes, strides, storage offset, dtype) over reference-counted
// storage, with PyTorch's semantics: copying a tensor shares it, views share the storage, and
// in-place ops (name ending in _) write through every view. The ops themselves live in
// core/ops/*.hpp as free functions; the methods here forward to them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/scalar.hpp"
#include "core/device.hpp"
#include "core/storage.hpp"

namespace actorch {

using shape_t = std::vector<int64_t>;

class tensor;
namespace cuda {
class stream; // core/cuda/stream.hpp
}
struct autograd_meta; // core/autograd/node.hpp
struct node;          // core/autograd/node.hpp

/// The state behind a tensor handle. Views get their own impl over the same storage.
struct tensor_impl {
  std::shared_ptr<actorch::storage> storage;
  shape_t sizes;
  shape_t strides;    // in elements
  int64_t offset = 0; // in elements
  actorch::dtype dtype = actorch::dtype::float32;
  /// Gradient state; null for tensors that never took part in autograd.
  std::shared_ptr<autograd_meta> autograd;
};

/// Returned by max(dim) / min(dim): the values and the indices where they were found.
struct values_indices;

class tensor {
public:
  /// An undefined tensor (defined() == false); most ops reject it.
  tensor() = default;
  explicit tensor(std::shared_ptr<tensor_impl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const { return int64_t(impl().sizes.size()); }
  const shape_t& sizes() const { return impl().sizes; }
  const shape_t& strides() const { return impl().strides; }
  /// size(d) and stride(d) accept negative dims, counted from the end.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t storage_offset() const { return impl().offset; }
  int64_t numel() const;
  actorch::dtype dtype() const { return impl().dtype; }
  actorch::device device() const { return impl().storage->device(); }
  size_t element_size() const { return actorch::element_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return actorch::is_floating_point(dtype()); }
  const std::shared_ptr<actorch::storage>& storage() const { return impl().storage; }
  /// True when both share one impl (the same tensor, not merely equal values).
  bool is_same(const tensor& o) const { return impl_ == o.impl_; }

  /// Pointer to the first element. @pre dtype() matches T.
  template <class T> T* data_ptr() const;
  void* data_ptr() const;

  /// The value of a one-element tensor, converted to T.
  template <class T> T item() const;

  // Views: share storage, never copy. ------------------------------------------------------
  tensor view(const shape_t& shape) const;
  /// view() when the layout allows it, a contiguous copy otherwise.
  tensor reshape(const shape_t& shape) const;
  tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  tensor transpose(int64_t dim0, int64_t dim1) const;
  /// transpose(0, 1) of a matrix; a vector is returned as is.
  tensor t() const;
  tensor permute(const shape_t& dims) const;
  tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  tensor select(int64_t dim, int64_t index) const;
  /// t[..., start:end:step, ...] along dim; start and end are clamped like Python slices.
  tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  tensor operator[](int64_t index) const { return select(0, index); }
  tensor squeeze() const;
  tensor squeeze(int64_t dim) const;
  tensor unsqueeze(int64_t dim) const;
  /// Broadcasts size-1 dims to `shape` (stride 0); -1 keeps a dim's size.
  tensor expand(const shape_t& shape) const;
  tensor expand_as(const tensor& other) const { return expand(other.sizes()); }
  /// A view with explicit sizes, strides and offset (elements) over the same storage; throws
  /// when it would reach outside the storage.
  tensor as_strided(const shape_t& size, const shape_t& stride, int64_t offset = -1) const;
  std::vector<tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<tensor> split(const shape_t& split_sizes, int64_t dim = 0) const;

  // Copies and conversions. ----------------------------------------------------------------
  /// This tensor if already contiguous, otherwise a contiguous copy.
  tensor contiguous() const;
  tensor clone() const;
  /// Copies src (broadcast to this shape, converted to this dtype) into this tensor. Between
  /// the host and a GPU, non_blocking makes a copy from or to pinned memory asynchronous on the
  /// GPU's current stream; any other copy returns once the data has arrived (PyTorch's rule).
  tensor& copy_(const tensor& src, bool non_blocking = false);
  /// This tensor when the dtype already matches (unless copy), otherwise a converted copy.
  tensor to(actorch::dtype t, bool copy = false) const;
  /// This tensor when already on `d` (unless copy), otherwise a copy on `d`; non_blocking as
  /// copy_'s. Autograd carries the gradient back to this tensor's device.
  tensor to(const actorch::device& d, bool non_blocking = false, bool copy = false) const;
  /// to(cuda:index), to(cpu) (torch's .cuda() and .cpu()).
  tensor cuda(int index = 0, bool non_blocking = false) const;
  tensor cpu() const;
  /// Whether the memory is page-locked host memory (torch.Tensor.is_pinned).
  bool is_pinned() const;
  /// torch.Tensor.record_stream: this CUDA tensor's memory is also used by work queued on `s`
  /// (a stream other than the one current when it was allocated). Once the memory is freed,
  /// the caching allocator hands it out again only after the work queued on `s` by then has
  /// run. Throws for a tensor not on the GPU of `s`, or over memory the allocator did not give.
  void record_stream(const cuda::stream& s) const;
  /// torch's .float(), .double(), .half(), .long(), .int(), .short(): C++ keywords, so spelled
  /// with to_ here (the Python module has torch's names).
  tensor to_float() const { return to(dtype::float32); }
  tensor to_double() const { return to(dtype::float64); }
  tensor to_half() const { return to(dtype::float16); }
  tensor to_long() const { return to(dtype::int64); }
  tensor to_int() const { return to(dtype::int32); }
  tensor to_short() const { return to(dtype::int16); }

  // Elementwise ops, with broadcasting (core/ops/elementwise.hpp). ---------------------------
  tensor add(const tensor& other, const scalar& alpha = 1) const;
  tensor add(const scalar& other) const;
  tensor sub(const tensor& other, const scalar& alpha = 1) const;
  tensor sub(const scalar& other) const;
  tensor mul(const tensor& other) const;
  tensor mul(const scalar& other) const;
  tensor div(const tensor& other) const;
  tensor div(const scalar& other) const;
  tensor pow(const tensor& exponent) const;
  tensor pow(const scalar& exponent) const;
  tensor neg() const;
  tensor abs() const;
  tensor exp() const;
  tensor log() const;
  tensor sqrt() const;
  tensor relu() const;
  tensor sigmoid() const;
  tensor tanh() const;
  tensor clamp(const scalar& min, const scalar& max) const;
  tensor clamp_min(const scalar& min) const;
  tensor clamp_max(const scalar& max) const;
  tensor eq(const tensor& other) const;
  tensor eq(const scalar& other) const;
  tensor ne(const tensor& other) const;
  tensor ne(const scalar& other) const;
  tensor lt(const tensor& other) const;
  tensor lt(const scalar& other) const;
  tensor le(const tensor& other) const;
  tensor le(const scalar& other) const;
  tensor gt(const tensor& other) const;
  tensor gt(const scalar& other) const;
  tensor ge(const tensor& other) const;
  tensor ge(const scalar& other) const;

  tensor& add_(const tensor& other, const scalar& alpha = 1);
  tensor& add_(const scalar& other);
  tensor& sub_(const tensor& other, const scalar& alpha = 1);
  tensor& sub_(const scalar& other);
  tensor& mul_(const tensor& other);
  tensor& mul_(const scalar& other);
  tensor& div_(const tensor& other);
  tensor& div_(const scalar& other);
  tensor& pow_(const scalar& exponent);
  tensor& neg_();
  tensor& abs_();
  tensor& exp_();
  tensor& log_();
  tensor& sqrt_();
  tensor& relu_();
  tensor& sigmoid_();
  tensor& tanh_();
  tensor& clamp_(const scalar& min, const scalar& max);
  tensor& fill_(const scalar& value);
  tensor& zero_();
  tensor masked_fill(const tensor& mask, const scalar& value) const;
  tensor& masked_fill_(const tensor& mask, const scalar& value);

  // Reductions (core/ops/reduce.hpp). --------------------------------------------------------
  tensor sum() const;
  tensor sum(const shape_t& dims, bool keepdim = false) const;
  tensor mean() const;
  tensor mean(const shape_t& dims, bool keepdim = false) const;
  tensor max() const;
  values_indices max(int64_t dim, bool keepdim = false) const;
  tensor min() const;
  values_indices min(int64_t dim, bool keepdim = false) const;
  tensor argmax() const;
  tensor argmax(int64_t dim, bool keepdim = false) const;
  tensor var(bool unbiased = true) const;
  tensor var(const shape_t& dims, bool unbiased = true, bool keepdim = false) const;
  /// Without this overload, var({1}) would convert {1} to bool and pick var(unbiased).
  tensor var(std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false) const;
  tensor std(bool unbiased = true) const;
  tensor std(const shape_t& dims, bool unbiased = true, bool keepdim = false) const;
  tensor std(std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false) const;
  tensor softmax(int64_t dim) const;
  tensor log_softmax(int64_t dim) const;

  // Linear algebra (core/ops/linalg.hpp) and indexing (core/ops/index.hpp). ------------------
  tensor matmul(const tensor& other) const;
  tensor mm(const tensor& other) const;
  tensor bmm(const tensor& other) const;
  tensor index_select(int64_t dim, const tensor& index) const;
  tensor gather(int64_t dim, const tensor& index) const;

  // Autograd (core/autograd/). ------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as needing gradients. @pre floating point dtype.
  tensor& requires_grad_(bool requires_grad = true);
  /// The accumulated gradient of a leaf (undefined until a backward pass reaches it).
  tensor grad() const;
  /// Replaces the gradient (an undefined tensor clears it, as `t.grad = None`).
  void set_grad(const tensor& grad);
  const std::shared_ptr<node>& grad_fn() const;
  /// True for tensors created by the user rather than by a recorded op.
  bool is_leaf() const;
  /// Computes gradients of this tensor w.r.t. the graph's leaves. A non-scalar tensor needs
  /// `gradient` (same shape). Frees the graph unless retain_graph.
  void backward(const tensor& gradient = {}, bool retain_graph = false) const;
  /// The same data, cut from the graph (shares storage).
  tensor detach() const;
  /// torch's `t.data = src`: this tensor (every handle of it) now reads and writes src's
  /// memory; its autograd state (requires_grad, .grad, hooks) stays its own. Trainer threads
  /// sharing one copy of the parameters use it. @pre same dtype, shape and device.
  void set_data(const tensor& src);
  /// Called with the leaf as soon as its gradient for the current backward pass has been
  /// accumulated, on the thread running backward (DistributedDataParallel's bucketing hook).
  void register_post_accumulate_grad_hook(std::function<void(const tensor&)> hook);

  /// PyTorch's repr: "tensor([[1., 2.],\n        [3., 4.]])", with dtype/device when not default.
  std::string str() const;

  /// The impl behind the handle (for autograd and serialization internals).
  const std::shared_ptr<tensor_impl>& impl_ptr() const;

private:
  const tensor_impl& impl() const;
  tensor_impl& impl();
  std::shared_ptr<tensor_impl> impl_;
};

struct values_indices {
  tensor values;
  tensor indices;
};

std::ostream& operator<<(std::ostream& os, const tensor& t);

// Operators, as in PyTorch's C++ API. ----------------------------------------------------------
tensor operator+(const tensor& a, const tensor& b);
tensor operator-(const tensor& a, const tensor& b);
tensor operator*(const tensor& a, const tensor& b);
tensor operator/(const tensor& a, const tensor& b);
tensor operator+(const tensor& a, const scalar& b);
tensor operator-(const tensor& a, const scalar& b);
tensor operator*(const tensor& a, const scalar& b);
tensor operator/(const tensor& a, const scalar& b);
tensor operator+(const scalar& a, const tensor& b);
tensor operator-(const scalar& a, const tensor& b);
tensor operator*(const scalar& a, const tensor& b);
tensor operator/(const scalar& a, const tensor& b);
tensor operator-(const tensor& a);
tensor& operator+=(tensor& a, const tensor& b);
tensor& operator-=(tensor& a, const tensor& b);
tensor& operator*=(tensor& a, const tensor& b);
tensor& operator/=(tensor& a, const tensor& b);
tensor& operator+=(tensor& a, const scalar& b);
tensor& operator-=(tensor& a, const scalar& b);
tensor& operator*=(tensor& a, const scalar& b);
tensor& operator/=(tensor& a, const scalar& b);

// Shape helpers shared by the ops. ------------------------------------------------------------

/// "[2, 3, 4]": shapes in error messages.
std::string shape_str(const shape_t& shape);
/// Checked product of sizes; throws on negative sizes or int64 overflow, naming `op`.
int64_t checked_numel(const shape_t& shape, const char* op);
/// Contiguous (row-major) strides for `shape`.
shape_t contiguous_strides(const shape_t& shape);
/// Wraps a possibly negative dim into [0, ndim), or throws naming `op` and the valid range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
/// Clears (set_to_none, PyTorch 2's default) or zeroes the gradient of each of `params`: what
/// optimizer.zero_grad and module.zero_grad do.
void zero_grads(const std::vector<tensor>& params, bool set_to_none = true);
/// torch.broadcast_shapes, throwing with both shapes and `op` when they do not broadcast.
shape_t broadcast_shapes(const shape_t& a, const shape_t& b, const char* op);

template <class T> T* tensor::data_ptr() const {
  ACTORCH_CHECK(dtype_of<T>() == dtype(), "data_ptr: tensor has dtype ", dtype_name(dtype()),
                " but ", dtype_name(dtype_of<T>()), " was requested");
  return static_cast<T*>(data_ptr());
}

/// Reads one element of a CPU tensor as T (used by item and printing).
scalar read_scalar(const tensor& t, int64_t element_offset);

template <class T> T tensor::item() const {
  ACTORCH_CHECK(numel() == 1, "item: a tensor with ", numel(),
                " elements cannot be converted to a scalar (shape ", shape_str(sizes()), ")");
  return read_scalar(*this, storage_offset()).to<T>();
}

} // namespace actorch
