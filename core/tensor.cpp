// tensor: shape bookkeeping, views, copies and conversions. Views only rewrite sizes, strides
// and offset over the same storage; copies go through kernels/cpu/copy.
#include "core/tensor.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/cuda/copy.hpp"
#include "core/cuda_memory.hpp"
#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/copy.hpp"
#include "kernels/cuda/copy.hpp"

namespace actorch {

// Shape helpers. -----------------------------------------------------------------------------

std::string shape_str(const shape_t& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t checked_numel(const shape_t& shape, const char* op) {
  int64_t n = 1;
  for (int64_t s : shape) {
    ACTORCH_CHECK(s >= 0, op, ": sizes must be non-negative but got ", shape_str(shape));
    ACTORCH_CHECK(!__builtin_mul_overflow(n, s, &n), op, ": shape ", shape_str(shape),
                  " has more elements than int64 can count (numel overflow)");
  }
  return n;
}

shape_t contiguous_strides(const shape_t& shape) {
  shape_t st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1); // a 0-dim tensor accepts dim 0 and -1
  ACTORCH_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ",
                ndim, " dims (expected a dim in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

shape_t broadcast_shapes(const shape_t& a, const shape_t& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  shape_t out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ACTORCH_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ",
                  shape_str(b), " cannot be broadcast together (dim ", int64_t(i) - int64_t(n),
                  ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

// Accessors. ---------------------------------------------------------------------------------

const tensor_impl& tensor::impl() const {
  ACTORCH_CHECK(impl_, "tensor: the tensor is undefined (default-constructed)");
  return *impl_;
}

const std::shared_ptr<tensor_impl>& tensor::impl_ptr() const {
  ACTORCH_CHECK(impl_, "tensor: the tensor is undefined (default-constructed)");
  return impl_;
}

tensor_impl& tensor::impl() {
  ACTORCH_CHECK(impl_, "tensor: the tensor is undefined (default-constructed)");
  return *impl_;
}

int64_t tensor::size(int64_t d) const {
  return sizes()[size_t(wrap_dim(d, dim(), "size"))];
}

int64_t tensor::stride(int64_t d) const {
  return strides()[size_t(wrap_dim(d, dim(), "stride"))];
}

int64_t tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes())
    n *= s;
  return n;
}

bool tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes().size(); i-- > 0;) {
    const int64_t s = sizes()[i];
    if (s == 0)
      return true;
    if (s != 1 && strides()[i] != expected)
      return false;
    expected *= s;
  }
  return true;
}

void* tensor::data_ptr() const {
  return static_cast<char*>(storage()->data()) + storage_offset() * int64_t(element_size());
}

scalar read_scalar(const tensor& t, int64_t element_offset) {
  const char* base = static_cast<const char*>(t.storage()->data());
  return dispatch(t.dtype(), [&]<class T>() {
    const char* at = base + element_offset * int64_t(sizeof(T));
    T value;
    if (t.device().is_cuda())
      cuda::read_to_host(&value, at, sizeof(T), t.device().index);
    else
      value = *reinterpret_cast<const T*>(at);
    return scalar(value);
  });
}

// Views. -------------------------------------------------------------------------------------

namespace {

tensor make_view(const tensor& base, shape_t sizes, shape_t strides, int64_t offset) {
  auto impl = std::make_shared<tensor_impl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return tensor(std::move(impl));
}

// Records the backward of a view op when its base takes part in autograd: `back` maps the
// view's gradient to the base's shape.
tensor track_view(const tensor& base, tensor view, const char* name,
                  std::function<tensor(const tensor&)> back) {
  if (autograd::needs_grad({&base}))
    autograd::record(view, name, {&base}, {}, [back = std::move(back)](const auto& g, const auto&) {
      return std::vector<tensor>{back(g[0])};
    });
  return view;
}

// The gradient of a view that picks a region of the base: zeros with g in that region.
std::function<tensor(const tensor&)> into_zeros(shape_t shape,
                                                std::function<tensor(tensor&)> region) {
  return [shape = std::move(shape), region = std::move(region)](const tensor& g) {
    tensor z = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
    region(z).copy_(g);
    return z;
  };
}

// Resolves one -1 in a requested shape from numel, as view/reshape do.
shape_t infer_shape(const shape_t& shape, int64_t numel, const char* op, const shape_t& from) {
  shape_t out = shape;
  int64_t known = 1;
  int64_t infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      ACTORCH_CHECK(infer < 0, op, ": only one dim can be -1 but got ", shape_str(shape));
      infer = int64_t(i);
    } else {
      ACTORCH_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    ACTORCH_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
                  " is invalid for input of size ", numel, " (shape ", shape_str(from), ")");
    out[size_t(infer)] = numel / known;
  } else {
    ACTORCH_CHECK(known == numel, op, ": shape ", shape_str(shape),
                  " is invalid for input of size ", numel, " (shape ", shape_str(from), ")");
  }
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without a copy, or empty when the layout
// does not allow it. Walks groups of old dims that are contiguous with each other and matches
// them against new dims of the same total size (PyTorch's computeStride).
std::optional<shape_t> view_strides(const shape_t& sizes, const shape_t& strides,
                                    const shape_t& shape, int64_t numel) {
  shape_t out(shape.size());
  if (numel == 0 || sizes.empty()) // nothing to keep in place: any layout is a valid view
    return contiguous_strides(shape);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[size_t(d)];
    // A chunk ends where the next-outer old dim is not contiguous with this one.
    if (d == 0 ||
        (sizes[size_t(d - 1)] != 1 && strides[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[size_t(view_d)] == 1)) {
        out[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel)
        return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1)
    return std::nullopt;
  return out;
}

} // namespace

tensor tensor::view(const shape_t& shape) const {
  const shape_t target = infer_shape(shape, numel(), "view", sizes());
  auto st = view_strides(sizes(), strides(), target, numel());
  ACTORCH_CHECK(st.has_value(), "view: shape ", shape_str(target),
                " is not compatible with the input's size ", shape_str(sizes()), " and stride ",
                shape_str(strides()),
                " (at least one dim spans two contiguous subspaces); use reshape instead");
  return track_view(*this, make_view(*this, target, std::move(*st), storage_offset()),
                    "ViewBackward0",
                    [shape = sizes()](const tensor& g) { return g.reshape(shape); });
}

tensor tensor::reshape(const shape_t& shape) const {
  const shape_t target = infer_shape(shape, numel(), "reshape", sizes());
  if (auto st = view_strides(sizes(), strides(), target, numel()))
    return track_view(*this, make_view(*this, target, std::move(*st), storage_offset()),
                      "ReshapeBackward0",
                      [shape = sizes()](const tensor& g) { return g.reshape(shape); });
  return clone().view(target);
}

tensor tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0)
    return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, dim(), "flatten");
  ACTORCH_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  shape_t shape(sizes().begin(), sizes().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d)
    n *= sizes()[size_t(d)];
  shape.push_back(n);
  shape.insert(shape.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(shape);
}

tensor tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int64_t a = wrap_dim(dim0, dim(), "transpose");
  const int64_t b = wrap_dim(dim1, dim(), "transpose");
  shape_t sz = sizes(), st = strides();
  std::swap(sz[size_t(a)], sz[size_t(b)]);
  std::swap(st[size_t(a)], st[size_t(b)]);
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "TransposeBackward0", [a, b](const tensor& g) { return g.transpose(a, b); });
}

tensor tensor::t() const {
  ACTORCH_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims but got ", dim(), " (shape ",
                shape_str(sizes()), ")");
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}

tensor tensor::permute(const shape_t& dims) const {
  ACTORCH_CHECK(int64_t(dims.size()) == dim(), "permute: got ", dims.size(), " dims ",
                shape_str(dims), " for a tensor with ", dim(), " dims");
  shape_t sz(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    ACTORCH_CHECK(!seen[size_t(d)], "permute: dim ", d, " repeats in ", shape_str(dims));
    seen[size_t(d)] = true;
    sz[i] = sizes()[size_t(d)];
    st[i] = strides()[size_t(d)];
  }
  shape_t inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[size_t(wrap_dim(dims[i], dim(), "permute"))] = int64_t(i);
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "PermuteBackward0", [inverse](const tensor& g) { return g.permute(inverse); });
}

tensor tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  ACTORCH_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "narrow");
  const int64_t n = sizes()[size_t(w)];
  if (start < 0)
    start += n;
  ACTORCH_CHECK(start >= 0 && start <= n && length >= 0 && start + length <= n, "narrow: start ",
                start, " and length ", length, " are out of range for dim ", w, " of size ", n);
  shape_t sz = sizes();
  sz[size_t(w)] = length;
  return track_view(
      *this, make_view(*this, std::move(sz), strides(), storage_offset() + start * stride(w)),
      "NarrowBackward0",
      into_zeros(sizes(), [w, start, length](tensor& z) { return z.narrow(w, start, length); }));
}

tensor tensor::select(int64_t d, int64_t index) const {
  ACTORCH_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "select");
  const int64_t n = sizes()[size_t(w)];
  ACTORCH_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", w,
                " of size ", n);
  if (index < 0)
    index += n;
  shape_t sz = sizes(), st = strides();
  const int64_t offset = storage_offset() + index * st[size_t(w)];
  sz.erase(sz.begin() + w);
  st.erase(st.begin() + w);
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), offset),
                    "SelectBackward0",
                    into_zeros(sizes(), [w, index](tensor& z) { return z.select(w, index); }));
}

tensor tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  ACTORCH_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "slice");
  ACTORCH_CHECK(step > 0, "slice: step must be positive but got ", step);
  const int64_t n = sizes()[size_t(w)];
  auto clamp_index = [n](int64_t i) {
    if (i < 0)
      i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  start = clamp_index(start);
  end = std::max(clamp_index(end), start);
  shape_t sz = sizes(), st = strides();
  sz[size_t(w)] = (end - start + step - 1) / step;
  st[size_t(w)] *= step;
  return track_view(
      *this, make_view(*this, std::move(sz), std::move(st), storage_offset() + start * stride(w)),
      "SliceBackward0", into_zeros(sizes(), [w, start, end, step](tensor& z) {
        return z.slice(w, start, end, step);
      }));
}

tensor tensor::squeeze() const {
  shape_t sz, st;
  for (size_t i = 0; i < sizes().size(); ++i) {
    if (sizes()[i] != 1) {
      sz.push_back(sizes()[i]);
      st.push_back(strides()[i]);
    }
  }
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "SqueezeBackward0",
                    [shape = sizes()](const tensor& g) { return g.reshape(shape); });
}

tensor tensor::squeeze(int64_t d) const {
  const int64_t w = wrap_dim(d, dim(), "squeeze");
  shape_t sz = sizes(), st = strides();
  if (dim() > 0 && sizes()[size_t(w)] == 1) {
    sz.erase(sz.begin() + w);
    st.erase(st.begin() + w);
  }
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "SqueezeBackward0",
                    [shape = sizes()](const tensor& g) { return g.reshape(shape); });
}

tensor tensor::unsqueeze(int64_t d) const {
  const int64_t w = wrap_dim(d, dim() + 1, "unsqueeze");
  shape_t sz = sizes(), st = strides();
  const int64_t new_stride =
      w < dim() ? sz[size_t(w)] * st[size_t(w)] : 1; // keeps the result contiguous if we were
  sz.insert(sz.begin() + w, 1);
  st.insert(st.begin() + w, new_stride);
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "UnsqueezeBackward0",
                    [shape = sizes()](const tensor& g) { return g.reshape(shape); });
}

tensor tensor::expand(const shape_t& shape) const {
  ACTORCH_CHECK(int64_t(shape.size()) >= dim(), "expand: the requested shape ", shape_str(shape),
                " has fewer dims than the tensor's ", shape_str(sizes()));
  const size_t lead = shape.size() - sizes().size();
  shape_t sz(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      ACTORCH_CHECK(shape[i] >= 0, "expand: size -1 is not allowed for the new leading dim ", i,
                    " in ", shape_str(shape));
      sz[i] = shape[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = sizes()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    ACTORCH_CHECK(have == want || have == 1, "expand: the expanded size ", want,
                  " must match the existing size ", have, " at dim ", i, " (tensor shape ",
                  shape_str(sizes()), ", requested ", shape_str(shape), ")");
    sz[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  return track_view(*this, make_view(*this, std::move(sz), std::move(st), storage_offset()),
                    "ExpandBackward0",
                    [shape = sizes()](const tensor& g) { return autograd::sum_to(g, shape); });
}

tensor tensor::as_strided(const shape_t& size, const shape_t& stride, int64_t offset) const {
  if (offset < 0)
    offset = storage_offset();
  ACTORCH_CHECK(size.size() == stride.size(), "as_strided: size ", shape_str(size), " and stride ",
                shape_str(stride), " differ in length");
  const int64_t n = checked_numel(size, "as_strided");
  int64_t last = offset;
  for (size_t d = 0; d < size.size() && n > 0; ++d) {
    ACTORCH_CHECK(stride[d] >= 0, "as_strided: negative stride ", stride[d], " at dim ", d);
    last += (size[d] - 1) * stride[d];
  }
  const int64_t capacity = int64_t(storage()->nbytes() / element_size());
  ACTORCH_CHECK(n == 0 || last < capacity, "as_strided: size ", shape_str(size), ", stride ",
                shape_str(stride), " and offset ", offset, " reach element ", last,
                " but the storage holds ", capacity);
  ACTORCH_CHECK(!autograd::needs_grad({this}), "as_strided: views with arbitrary strides of a "
                                               "tensor that requires grad are not differentiable "
                                               "in actorch; use view, narrow, select or slice");
  return make_view(*this, size, stride, offset);
}

std::vector<tensor> tensor::split(int64_t split_size, int64_t d) const {
  ACTORCH_CHECK(dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "split");
  const int64_t n = sizes()[size_t(w)];
  ACTORCH_CHECK(split_size > 0 || (split_size == 0 && n == 0),
                "split: split_size must be positive but got ", split_size);
  std::vector<tensor> parts;
  if (n == 0)
    return {narrow(w, 0, 0)};
  for (int64_t start = 0; start < n; start += split_size)
    parts.push_back(narrow(w, start, std::min(split_size, n - start)));
  return parts;
}

std::vector<tensor> tensor::split(const shape_t& split_sizes, int64_t d) const {
  ACTORCH_CHECK(dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "split");
  const int64_t total = std::accumulate(split_sizes.begin(), split_sizes.end(), int64_t(0));
  ACTORCH_CHECK(total == sizes()[size_t(w)], "split: split_sizes ", shape_str(split_sizes),
                " sum to ", total, " but dim ", w, " has size ", sizes()[size_t(w)]);
  std::vector<tensor> parts;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    ACTORCH_CHECK(s >= 0, "split: split_sizes must be non-negative but got ",
                  shape_str(split_sizes));
    parts.push_back(narrow(w, start, s));
    start += s;
  }
  return parts;
}

std::vector<tensor> tensor::chunk(int64_t chunks, int64_t d) const {
  ACTORCH_CHECK(chunks > 0, "chunk: chunks must be positive but got ", chunks);
  ACTORCH_CHECK(dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t w = wrap_dim(d, dim(), "chunk");
  const int64_t n = sizes()[size_t(w)];
  return split(std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), w);
}

// Copies and conversions. --------------------------------------------------------------------

namespace {

bool same_layout(const tensor& a, const tensor& b) {
  return a.storage() == b.storage() && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

// Whether the memory spans of a and b, both in one storage, may intersect.
bool may_overlap(const tensor& a, const tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0)
    return false;
  auto span = [](const tensor& t) {
    int64_t lo = t.storage_offset(), hi = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t extent = (t.sizes()[size_t(d)] - 1) * t.strides()[size_t(d)];
      (extent < 0 ? lo : hi) += extent;
    }
    return std::pair{lo, hi};
  };
  auto [alo, ahi] = span(a);
  auto [blo, bhi] = span(b);
  return alo <= bhi && blo <= ahi;
}

} // namespace

void check_writable(const tensor& out, const char* op) {
  autograd::check_in_place(out, op);
  out.storage()->bump_version();
  for (int64_t d = 0; d < out.dim(); ++d)
    ACTORCH_CHECK(out.strides()[size_t(d)] != 0 || out.sizes()[size_t(d)] <= 1, op,
                  ": cannot write in place to a tensor with broadcast (stride 0) dim ", d,
                  " (shape ", shape_str(out.sizes()), ", stride ", shape_str(out.strides()),
                  "); clone() it first");
}

tensor unaliased_input(const tensor& out, const tensor& in) {
  // Reading and writing one memory location through different layouts would depend on the
  // order of the loop; such an input is copied first. The same layout is safe elementwise.
  if (!same_layout(out, in) && may_overlap(out, in))
    return in.clone();
  return in;
}

tensor& tensor::copy_(const tensor& src, bool non_blocking) {
  check_defined("copy_", {this, &src});
  ACTORCH_CHECK(src.dim() <= dim() && broadcast_shapes(sizes(), src.sizes(), "copy_") == sizes(),
                "copy_: source shape ", shape_str(src.sizes()),
                " cannot be broadcast to the destination shape ", shape_str(sizes()));
  check_writable(*this, "copy_");
  autograd::check_in_place(*this, "copy_", {&src});
  if (same_layout(*this, src))
    return *this;
  if (device() != src.device()) {
    cuda::copy_across_devices(*this, src, non_blocking);
    return *this;
  }
  const tensor in = unaliased_input(*this, src);
  ACTORCH_KERNEL(device(), copy, dtype(), in.dtype(), make_loop<2>(*this, {&in}));
  return *this;
}

tensor tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

tensor tensor::clone() const {
  return to(dtype(), true);
}

namespace {
// A copy of `t` as `dt` on `dev`. Its backward passes the gradient as it is: the engine casts it
// to t's dtype and moves it to t's device (validate in core/autograd/engine.cpp).
tensor copy_as(const tensor& t, dtype dt, const device& dev, bool non_blocking) {
  const bool track = autograd::needs_grad({&t}) && is_floating_point(dt);
  tensor out = empty(t.sizes(), {.dtype = dt, .device = dev});
  {
    no_grad untracked;
    out.copy_(t, non_blocking);
  }
  if (track)
    autograd::record(
        out, dt == t.dtype() && dev == t.device() ? "CloneBackward0" : "ToCopyBackward0", {&t}, {},
        [](const auto& g, const auto&) { return std::vector<tensor>{g[0]}; });
  return out;
}
} // namespace

tensor tensor::to(actorch::dtype t, bool copy) const {
  return t == dtype() && !copy ? *this : copy_as(*this, t, device(), false);
}

tensor tensor::to(const actorch::device& d, bool non_blocking, bool copy) const {
  return d == device() && !copy ? *this : copy_as(*this, dtype(), d, non_blocking);
}

tensor tensor::cuda(int index, bool non_blocking) const {
  return to(actorch::device(device_type::cuda, index), non_blocking);
}

tensor tensor::cpu() const {
  return to(kCPU);
}

bool tensor::is_pinned() const {
  return cuda::is_pinned(*this);
}

void tensor::record_stream(const cuda::stream& s) const {
  ACTORCH_CHECK(defined() && device().is_cuda(), "record_stream: expected a CUDA tensor but got ",
                defined() ? "one on " + device().str() : std::string("an undefined tensor"));
  ACTORCH_CHECK(s.device() == device().index, "record_stream: the stream is on cuda:", s.device(),
                " but the tensor on ", device());
  ACTORCH_CHECK(storage()->owner() != nullptr,
                "record_stream: the tensor's memory was given to from_blob, not allocated by the "
                "CUDA caching allocator");
  cuda_caching_allocator().record_stream(storage()->data(), reinterpret_cast<stream_id>(s.handle()),
                                         s.lifetime());
}

std::ostream& operator<<(std::ostream& os, const tensor& t) {
  return os << t.str();
}

} // namespace actorch
