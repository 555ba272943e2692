// Creating tensors, as torch's creation ops: from data (a copy, or from_blob without one),
// filled (empty/zeros/ones/full and *_like), ranges (arange, range, linspace, logspace), eye,
// and random (rand, randn, randint, randperm, normal) drawn from an actorch::generator.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace actorch {

/// dtype, device and memory of a new tensor, and whether autograd records ops on it. An unset
/// dtype means the op's default (float32, or inferred from the values as torch does for full,
/// arange and as_tensor).
struct tensor_options {
  std::optional<actorch::dtype> dtype =
      std::nullopt; // initialised, so {.device = ...} alone is no -Wextra warning
  actorch::device device = kCPU;
  /// Allocate in pinned host memory (see pinned_allocator()).
  bool pin_memory = false;
  /// The new tensor is a leaf that requires grad (floating point dtypes only, as in torch).
  bool requires_grad = false;
};

tensor empty(const shape_t& shape, const tensor_options& opts = {});
tensor zeros(const shape_t& shape, const tensor_options& opts = {});
tensor ones(const shape_t& shape, const tensor_options& opts = {});
/// dtype defaults to the value's: bool, int64, or float32.
tensor full(const shape_t& shape, const scalar& value, const tensor_options& opts = {});
/// The *_like ops keep `like`'s dtype and device unless opts names others.
tensor empty_like(const tensor& like, const tensor_options& opts = {});
tensor zeros_like(const tensor& like, const tensor_options& opts = {});
tensor ones_like(const tensor& like, const tensor_options& opts = {});
tensor full_like(const tensor& like, const scalar& value, const tensor_options& opts = {});
/// A 0-dim tensor holding `value` (dtype defaults to the value's, as in full).
tensor scalar_tensor(const scalar& value, const tensor_options& opts = {});

/// A copy of `values` shaped as `shape` ({-1}: 1-D). dtype defaults to T's
/// (torch.as_tensor over a numpy array keeps its dtype).
template <class T>
tensor as_tensor(const std::vector<T>& values, const shape_t& shape = {-1},
                 const tensor_options& opts = {});

/// torch.tensor([...]) and torch.tensor([[...], ...]): C++ double literals give float32 (the
/// default dtype) and integer literals int64, as Python numbers do.
template <class T>
tensor tensor_of(std::initializer_list<T> values, const tensor_options& opts = {});
template <class T>
tensor tensor_of(std::initializer_list<std::initializer_list<T>> rows,
                 const tensor_options& opts = {});

/// Wraps memory owned by the caller, without a copy (torch.from_blob). `deleter`, if given,
/// runs when the last view is gone; otherwise the memory must outlive every view. Strides
/// default to contiguous. `dev` says where the memory is (torch.from_blob's options.device).
/// @pre data is aligned to the dtype's size.
tensor from_blob(void* data, const shape_t& shape, actorch::dtype dt,
                 std::function<void(void*)> deleter = {}, const shape_t& strides = {},
                 const actorch::device& dev = kCPU);

/// [start, end) in steps of `step`. int64 when all three are integers, float32 otherwise.
tensor arange(const scalar& end, const tensor_options& opts = {});
tensor arange(const scalar& start, const scalar& end, const scalar& step = 1,
              const tensor_options& opts = {});
/// [start, end] in steps of `step` (torch.range, deprecated there but still used); float32.
tensor range(const scalar& start, const scalar& end, const scalar& step = 1,
             const tensor_options& opts = {});
tensor linspace(const scalar& start, const scalar& end, int64_t steps,
                const tensor_options& opts = {});
tensor logspace(const scalar& start, const scalar& end, int64_t steps, double base = 10.0,
                const tensor_options& opts = {});
/// n x m identity (m = n when m < 0).
tensor eye(int64_t n, int64_t m = -1, const tensor_options& opts = {});

/// Uniform on [0, 1).
tensor rand(const shape_t& shape, const tensor_options& opts = {}, generator* gen = nullptr);
/// Standard normal.
tensor randn(const shape_t& shape, const tensor_options& opts = {}, generator* gen = nullptr);
/// Uniform integers in [low, high); int64 unless opts says otherwise.
tensor randint(int64_t low, int64_t high, const shape_t& shape, const tensor_options& opts = {},
               generator* gen = nullptr);
/// A random permutation of 0..n-1; int64 unless opts says otherwise.
tensor randperm(int64_t n, const tensor_options& opts = {}, generator* gen = nullptr);
/// randperm's values (the same draws) as a vector, for index samplers: no tensor, no copy.
std::vector<int64_t> randperm_indices(int64_t n, generator* gen = nullptr);
/// Normal with the given mean and standard deviation.
tensor normal(double mean, double std, const shape_t& shape, const tensor_options& opts = {},
              generator* gen = nullptr);
/// Normal with a mean and a standard deviation per element (torch.normal(mean, std)): `mean`
/// and `std` broadcast together to the result's shape and promote to its floating dtype. A
/// scalar on either side as torch.normal(mean, std=1.0) and torch.normal(0.0, std).
tensor normal(const tensor& mean, const tensor& std, generator* gen = nullptr);
tensor normal(const tensor& mean, double std = 1.0, generator* gen = nullptr);
tensor normal(double mean, const tensor& std, generator* gen = nullptr);

/// rand, randn and randint shaped like `like`, keeping its dtype and device unless opts names
/// others (torch.rand_like, randn_like, randint_like).
tensor rand_like(const tensor& like, const tensor_options& opts = {}, generator* gen = nullptr);
tensor randn_like(const tensor& like, const tensor_options& opts = {}, generator* gen = nullptr);
/// Uniform integers in [0, high) or [low, high).
tensor randint_like(const tensor& like, int64_t high, const tensor_options& opts = {},
                    generator* gen = nullptr);
tensor randint_like(const tensor& like, int64_t low, int64_t high, const tensor_options& opts = {},
                    generator* gen = nullptr);

// Template definitions. ------------------------------------------------------------------------

template <class T>
tensor as_tensor(const std::vector<T>& values, const shape_t& shape, const tensor_options& opts) {
  // std::vector<bool> packs its bits: copy through bytes, which is what bool tensors hold.
  using elem = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
  std::vector<elem> bytes;
  const elem* data = nullptr;
  if constexpr (std::is_same_v<T, bool>) {
    bytes.assign(values.begin(), values.end());
    data = bytes.data();
  } else {
    data = values.data();
  }
  tensor src = from_blob(const_cast<elem*>(data), {int64_t(values.size())}, dtype_of<T>());
  tensor out = empty({int64_t(values.size())}, {.dtype = opts.dtype.value_or(dtype_of<T>()),
                                                .device = opts.device,
                                                .pin_memory = opts.pin_memory});
  out.copy_(src);
  tensor shaped = out.view(shape);
  if (opts.requires_grad)
    shaped.requires_grad_();
  return shaped;
}

namespace detail {
template <class T> constexpr actorch::dtype literal_dtype() {
  if constexpr (std::is_same_v<T, bool>)
    return dtype::bool_;
  else if constexpr (std::is_same_v<T, double>)
    return dtype::float32;
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint8_t> &&
                     !std::is_same_v<T, int8_t>)
    return dtype::int64;
  else
    return dtype_of<T>();
}
} // namespace detail

template <class T> tensor tensor_of(std::initializer_list<T> values, const tensor_options& opts) {
  tensor_options o = opts;
  o.dtype = opts.dtype.value_or(detail::literal_dtype<T>());
  return as_tensor(std::vector<T>(values), {int64_t(values.size())}, o);
}

template <class T>
tensor tensor_of(std::initializer_list<std::initializer_list<T>> rows, const tensor_options& opts) {
  std::vector<T> flat;
  const int64_t cols = rows.size() ? int64_t(rows.begin()->size()) : 0;
  for (const auto& row : rows) {
    ACTORCH_CHECK(int64_t(row.size()) == cols, "tensor_of: rows have different lengths (", cols,
                  " and ", row.size(), ")");
    flat.insert(flat.end(), row.begin(), row.end());
  }
  tensor_options o = opts;
  o.dtype = opts.dtype.value_or(detail::literal_dtype<T>());
  return as_tensor(flat, {int64_t(rows.size()), cols}, o);
}

} // namespace actorch
