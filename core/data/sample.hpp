// actorch::data::sample: one structured value flowing through the data pipeline, as Python
// datasets return them: a tensor, a number, a string, or tuples and string-keyed maps of these,
// nested. Datasets return samples, collate turns a list of samples into one batch sample, and
// the loader hands batch samples to the consumer.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::data {

class sample {
public:
  /// A Python tuple (or list) of samples.
  using tuple = std::vector<sample>;
  /// A Python dict with string keys; keeps insertion order, as Python's dict does.
  using dict = std::vector<std::pair<std::string, sample>>;
  enum class kind : uint8_t { none, tensor, integer, floating, boolean, string, tuple, dict };

  /// None.
  sample() = default;
  sample(actorch::tensor t) : v_(std::move(t)) {} // NOLINT: implicit, samples read like Python
  template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) sample(T v)
      : v_(int64_t(v)) {} // NOLINT
  template <class T>
  requires std::is_floating_point_v<T> sample(T v) : v_(double(v)) {} // NOLINT
  sample(bool v) : v_(v) {}                                           // NOLINT
  sample(std::string s) : v_(std::move(s)) {}                         // NOLINT
  sample(const char* s) : v_(std::string(s)) {}                       // NOLINT
  sample(tuple t) : v_(std::move(t)) {}                               // NOLINT
  sample(dict d) : v_(std::move(d)) {}                                // NOLINT

  /// (a, b, ...) and {"k": v, ...} spelled in C++.
  static sample make_tuple(std::initializer_list<sample> items) { return sample(tuple(items)); }
  static sample make_dict(std::initializer_list<std::pair<std::string, sample>> items) {
    return sample(dict(items));
  }

  kind type() const { return kind(v_.index()); }
  bool is_none() const { return type() == kind::none; }
  bool is_tensor() const { return type() == kind::tensor; }
  bool is_tuple() const { return type() == kind::tuple; }
  bool is_dict() const { return type() == kind::dict; }

  /// Typed access; each throws actorch::error naming the kind held when it does not match.
  const actorch::tensor& as_tensor() const;
  int64_t as_int() const;
  double as_double() const; // also accepts an integer
  bool as_bool() const;
  const std::string& as_string() const;
  const tuple& as_tuple() const;
  const dict& as_dict() const;
  tuple& as_tuple();
  dict& as_dict();

  /// t[i] of a tuple and d[key] of a dict; throw actorch::error when out of range or missing.
  const sample& operator[](size_t i) const;
  const sample& operator[](std::string_view key) const;
  size_t size() const; // elements of a tuple or dict

  /// A Python-like rendering: (tensor([1, 2]), 3, 'a', {'k': 1.5}).
  std::string str() const;

  /// Calls f(tensor&) on every tensor inside, depth first (used to pin or copy batches).
  template <class F> void for_each_tensor(F&& f) {
    if (auto* t = std::get_if<actorch::tensor>(&v_))
      f(*t);
    else if (auto* tu = std::get_if<tuple>(&v_))
      for (auto& s : *tu)
        s.for_each_tensor(f);
    else if (auto* d = std::get_if<dict>(&v_))
      for (auto& kv : *d)
        kv.second.for_each_tensor(f);
  }

private:
  std::variant<std::monostate, actorch::tensor, int64_t, double, bool, std::string, tuple, dict> v_;
};

/// "none", "tensor", "int", "float", "bool", "str", "tuple", "dict".
const char* kind_name(sample::kind k);

/// Deep equality: tensors compare by shape, dtype and values (not identity).
bool equal(const sample& a, const sample& b);

} // namespace actorch::data
