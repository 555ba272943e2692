// A number passed to an op (t.add(2), full(shape, 0.5)): a bool, an integer or a float, whose
// category takes part in type promotion as PyTorch's "wrapped numbers" do.
#pragma once

#include <cstdint>
#include <type_traits>

#include "base/dtype.hpp"

namespace actorch {

class scalar {
public:
  enum class kind : uint8_t { boolean, integer, floating };

  scalar() : scalar(int64_t(0)) {}
  template <class T>
  requires std::is_arithmetic_v<T>
  scalar(T v) { // NOLINT: implicit, so that numbers read naturally at call sites
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = kind::boolean;
      i_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = kind::integer;
      i_ = int64_t(v);
    } else {
      kind_ = kind::floating;
      d_ = double(v);
    }
  }
  scalar(half v) : scalar(float(v)) {}     // NOLINT
  scalar(bfloat16 v) : scalar(float(v)) {} // NOLINT

  kind type() const { return kind_; }
  bool is_floating_point() const { return kind_ == kind::floating; }
  double to_double() const { return kind_ == kind::floating ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == kind::floating ? int64_t(d_) : i_; }
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return kind_ == kind::floating ? d_ != 0.0 : i_ != 0;
    else if constexpr (is_floating_v<T>)
      return T(to_double());
    else
      return kind_ == kind::floating ? T(d_) : T(i_);
  }
  /// The dtype a wrapped number of this kind counts as: bool, int64, or float32 (the default).
  dtype default_dtype() const {
    return kind_ == kind::boolean   ? dtype::bool_
           : kind_ == kind::integer ? dtype::int64
                                    : dtype::float32;
  }

private:
  kind kind_;
  int64_t i_ = 0;
  double d_ = 0.0;
};

} // namespace actorch
