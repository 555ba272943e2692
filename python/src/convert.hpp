// Between Python values and actorch's: tensors through DLPack (zero-copy both ways), samples
// (numbers, strings, tuples, dicts, tensors, nested) to and from Python objects; the GIL on any
// thread is gil.hpp's. Shared by every binding file of the _C
// module (see Note [Python module] in module.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "core/data/sample.hpp"
#include "core/tensor.hpp"
#include "python/src/gil.hpp"

namespace actorch::python {

namespace py = pybind11;

/// A "dltensor" capsule over `t`; a capsule nobody consumes releases `t` itself.
py::capsule to_capsule(const tensor& t);

/// actorch.from_dlpack: an object with __dlpack__ (numpy array, torch tensor), or a capsule.
tensor tensor_from_dlpack(const py::object& obj);

/// Whether `import torch` works (asked once).
bool torch_available();

/// How a sample becomes Python objects.
struct to_python_options {
  /// Tensors as torch tensors (zero-copy) rather than actorch.Tensor.
  bool as_torch = false;
  /// A batch as torch's default_convert (converted) or default_collate (collated) gives it:
  /// tuples become lists, except that a collated batch of strings inside a sequence is a tuple.
  enum class form { sample, converted, collated };
  form as = form::sample;
};

/// A sample as Python objects: numbers, strings, tuples (lists for a batch), dicts, tensors;
/// a namedtuple, another container type (OrderedDict, UserDict, a list subclass) and a Python
/// object the sample holds opaquely come back as they went in.
py::object to_python(const data::sample& s, const to_python_options& o);

/// A Python value as a sample: tensors through DLPack (numpy arrays, torch tensors,
/// actorch.Tensor; a read-only numpy array is copied), numpy scalars as 0-dim tensors, bool,
/// int, float, str, tuples and lists, dicts and other mappings with str keys, other sequences,
/// namedtuples (the types but for tuple, list and dict kept by name, see Note [Namedtuples in
/// samples] in convert.cpp). Anything else is held as an opaque Python object
/// (python_value), which a Python collate_fn may take and default_collate refuses, naming its
/// type. @pre the GIL is held.
data::sample from_python(const py::handle& obj);

/// A Python object held inside a sample (kind custom): what a Python dataset returned that is
/// no tensor, number, string or container of them (a PIL image for a collate_fn of the user's),
/// and a Python collate_fn's batch. It leaves a worker process pickled, its tensors and numpy
/// arrays beside the pickle (Note [Python objects across processes] in convert.cpp).
class python_value : public data::custom_value {
public:
  explicit python_value(py::object o);
  ~python_value() override;
  std::string type_name() const override;
  void for_each_tensor(const std::function<void(tensor&)>& f) override;
  std::optional<data::custom_wire> to_wire() const override;
  /// bytes: torch's default_collate returns a batch of them as it came (its string_classes).
  bool collates_as_sequence() const override { return is_bytes_; }
  const py::object& object() const { return obj_; }

private:
  py::object obj_;
  std::string type_name_;
  bool is_bytes_;
};

/// Registers the codec that rebuilds a python_value sent by a worker process (called once, when
/// the module is imported).
void register_python_codec();

/// Where a Python exception caught in C++ goes on: an actorch::error whose message carries the
/// exception's type (module and qualified name), message and traceback in a form
/// actorch.data's loader turns back into the original type (Note [Python exceptions across
/// workers] in convert.cpp). @pre the GIL is held.
[[noreturn]] void rethrow_python_error(py::error_already_set& e, const std::string& context);

} // namespace actorch::python
