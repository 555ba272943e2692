// actorch::data::sample: one structured value flowing through the data pipeline, as Python
// datasets return them: a tensor, a number, a string, or tuples and string-keyed maps of these,
// nested; or a value of the user's own type (custom_value: torch's custom batch class). Datasets
// return samples, collate turns a list of samples into one batch sample, and the loader hands batch
// samples to the consumer.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::data {

/// A batch type of the user's own, as torch's custom batch classes: a struct of tensors that a
/// collate_fn builds and the consumer reads back with sample::as_custom<T>(). Held by
/// shared_ptr, so copies of a sample share it, as Python references do. It leaves a worker
/// process (multiprocessing_context "fork") only through to_wire and a codec registered in the
/// loader's process (register_custom_codec); without them the worker refuses it, naming its type.
class custom_value;

/// A custom value as a worker process sends it to the loader's process: the name of the codec
/// that rebuilds it there, bytes of its own format, and its tensors, which travel through the
/// shared batch file as a batch's tensors do (zero-copy when they are in it already).
struct custom_wire {
  std::string codec;
  std::string bytes;
  std::vector<actorch::tensor> tensors;
};

/// Rebuilds a value from what its to_wire sent; it runs on a thread of the loader's process.
using custom_codec = std::function<std::shared_ptr<custom_value>(custom_wire)>;

/// Names the function that rebuilds the values sent as `codec`. Register it in the loader's
/// process before the epoch that needs it; a later registration under the same name replaces it.
void register_custom_codec(const std::string& codec, custom_codec fn);

/// The value `w` describes, rebuilt by its codec; throws naming the codec when none is registered
/// or when the codec made none.
std::shared_ptr<custom_value> custom_from_wire(custom_wire w);

class custom_value {
public:
  virtual ~custom_value() = default;
  /// The type's name, for messages and str().
  virtual std::string type_name() const = 0;
  /// Calls f on each tensor it holds (what the default pin_memory and str() visit).
  virtual void for_each_tensor(const std::function<void(tensor&)>& f) = 0;
  /// Makes a pinned copy of a tensor, from the loader's pinned buffers.
  using pin_fn = std::function<tensor(const tensor&)>;
  /// The loader's pin_memory stage calls this, as torch calls a custom batch's pin_memory():
  /// replace the tensors by `pin`'s copies. The default pins every tensor for_each_tensor
  /// visits; override it to pin only some, or to do more.
  virtual void pin_memory(const pin_fn& pin);
  /// The value as it leaves a worker process (see custom_wire); nullopt, the default: it cannot.
  virtual std::optional<custom_wire> to_wire() const { return std::nullopt; }
  /// True where the default collate batches such values as it batches strings, into the
  /// sequence of them, as torch's default_collate does Python's bytes; false, the default: the
  /// default collate refuses the type, naming it.
  virtual bool collates_as_sequence() const { return false; }
};

class sample {
public:
  /// A Python tuple (or list) of samples.
  using tuple = std::vector<sample>;
  /// A Python dict with string keys; keeps insertion order, as Python's dict does.
  using dict = std::vector<std::pair<std::string, sample>>;
  enum class kind : uint8_t {
    none,
    tensor,
    integer,
    floating,
    boolean,
    string,
    tuple,
    dict,
    custom
  };

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
  template <class T>
  requires std::is_base_of_v<custom_value, T> sample(std::shared_ptr<T> v) // NOLINT
      : v_(std::shared_ptr<custom_value>(std::move(v))) {
    ACTORCH_CHECK(std::get<std::shared_ptr<custom_value>>(v_) != nullptr,
                  "sample: a null custom value");
  }

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
  const std::shared_ptr<custom_value>& as_custom() const;
  /// The custom value as the user's type T; throws naming both types when it is another.
  template <class T> T& as_custom() const {
    T* p = dynamic_cast<T*>(as_custom().get());
    ACTORCH_CHECK(p != nullptr, "sample: the custom value is a ", as_custom()->type_name(),
                  ", not the type asked for");
    return *p;
  }

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
    else if (auto* c = std::get_if<std::shared_ptr<custom_value>>(&v_))
      (*c)->for_each_tensor([&f](actorch::tensor& x) { f(x); });
  }

private:
  std::variant<std::monostate, actorch::tensor, int64_t, double, bool, std::string, tuple, dict,
               std::shared_ptr<custom_value>>
      v_;
};

/// "none", "tensor", "int", "float", "bool", "str", "tuple", "dict", "custom".
const char* kind_name(sample::kind k);

/// Deep equality: tensors compare by shape, dtype and values (not identity); custom values by
/// type name and their tensors.
bool equal(const sample& a, const sample& b);

} // namespace actorch::data
