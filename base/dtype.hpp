// Element types of tensors, their sizes and names, PyTorch's type-promotion lattice, and the
// dispatch helper that turns a runtime dtype into a C++ type for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "base/half.hpp"

namespace actorch {

enum class dtype : uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  int8,
  uint8,
  int32,
  int64,
  bool_,
  int16, // last, so that the codes of the others stay as they were
};

inline constexpr int num_dtypes = 10;

/// PyTorch's name without the "torch." prefix: "float32", "int64", "bool".
std::string_view dtype_name(dtype t);
size_t element_size(dtype t);
bool is_floating_point(dtype t);
bool is_integral(dtype t, bool include_bool = false);

/// torch.promote_types: the smallest dtype both a and b convert to without losing category.
dtype promote_types(dtype a, dtype b);

/// The dtype of a C++ scalar type (float -> float32, bool -> bool_, ...).
template <class T> constexpr dtype dtype_of();
template <> constexpr dtype dtype_of<float>() {
  return dtype::float32;
}
template <> constexpr dtype dtype_of<double>() {
  return dtype::float64;
}
template <> constexpr dtype dtype_of<half>() {
  return dtype::float16;
}
template <> constexpr dtype dtype_of<bfloat16>() {
  return dtype::bfloat16;
}
template <> constexpr dtype dtype_of<int8_t>() {
  return dtype::int8;
}
template <> constexpr dtype dtype_of<uint8_t>() {
  return dtype::uint8;
}
template <> constexpr dtype dtype_of<int16_t>() {
  return dtype::int16;
}
template <> constexpr dtype dtype_of<int32_t>() {
  return dtype::int32;
}
template <> constexpr dtype dtype_of<int64_t>() {
  return dtype::int64;
}
template <> constexpr dtype dtype_of<bool>() {
  return dtype::bool_;
}

/// The type arithmetic on T is carried out in: float for the 16-bit floats, T otherwise.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

/// The type reductions over T accumulate in: double for floats, int64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

template <class T> inline constexpr bool is_floating_v = std::is_floating_point_v<compute_t<T>>;

/// Calls fn.template operator()<T>() with T the C++ type of `t`.
template <class Fn> decltype(auto) dispatch(dtype t, Fn&& fn) {
  switch (t) {
  case dtype::float32: return fn.template operator()<float>();
  case dtype::float64: return fn.template operator()<double>();
  case dtype::float16: return fn.template operator()<half>();
  case dtype::bfloat16: return fn.template operator()<bfloat16>();
  case dtype::int8: return fn.template operator()<int8_t>();
  case dtype::uint8: return fn.template operator()<uint8_t>();
  case dtype::int16: return fn.template operator()<int16_t>();
  case dtype::int32: return fn.template operator()<int32_t>();
  case dtype::int64: return fn.template operator()<int64_t>();
  case dtype::bool_: break;
  }
  return fn.template operator()<bool>();
}

} // namespace actorch
