// Between Python values and actorch's (convert.hpp).
//
// Note [Namedtuples in samples]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's default_collate keeps a namedtuple's type (Point(x=tensor, y=tensor)) and turns other
// tuples and lists into lists. A sample has tuples and dicts only, and it crosses into worker
// processes and through the C++ collate, so a namedtuple travels as a dict whose first key is
// kNamedtupleKey, holding "module:qualname" (a string, collated to a list of equal strings), then
// its fields by name. to_python rebuilds the class from that name. A namedtuple class that
// cannot be imported by name (made inside a function) comes back as a dict of its fields.
// Other containers keep their type as torch's default_collate and default_convert keep it, by
// calling it on the collated contents: a mapping other than a plain dict (OrderedDict, a
// UserDict such as transformers' BatchEncoding) travels as a dict whose first key is
// kMappingKey, holding its type's name, and a sequence other than a tuple or a plain list (a
// list subclass, a UserList) as a dict whose first key is kSequenceKey, then its items under "0",
// "1", ... (so that samples of unequal lengths do not collate, as torch refuses them). to_python
// calls the type with the dict (or list) of its values, and gives the plain dict (or list) where
// that raises TypeError (defaultdict, range) or the type cannot be imported, as torch does.
//
// Note [Python exceptions across workers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An exception a Python dataset raises in a loader worker (a thread or a process) travels as an
// actorch::error's text, since that is what crosses a worker process's socket. The text names the
// exception's type and message first, as the loader prefixes it ("DataLoader worker 1 failed on
// sample index 17 (batch 3): ValueError: ..."), then a line "(Python exception type
// module:qualname; the worker's traceback follows)" and the worker's traceback. actorch.data's
// DataLoader finds that line and raises the original type with the whole text as its message,
// as torch's ExceptionWrapper does (RuntimeError where the type cannot be rebuilt).
//
// Note [Python objects across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's worker processes pickle each batch (its tensors' storage moved to shared memory), so
// a collate_fn's batch comes back as the very types it built: lists, numpy arrays, sets, a class
// of the user's. Here a python_value (a Python collate_fn's batch, or an object a batch holds)
// leaves a worker process through to_wire: actorch.data._wire pickles it, taking each CPU torch
// tensor and numpy array of a dtype actorch has out of the pickle (a persistent id: index, kind,
// requires_grad), and those travel as the batch's tensors do, through the shared batch file
// (Note [Custom values across processes] in actors/loader/worker_wire.cpp). In the loader's
// process the codec keeps the bytes and tensors (a pickled_value, no GIL needed), and to_python
// unpickles them on the consumer's thread: a torch tensor over the tensor's memory (or an
// actorch.Tensor, as the iterator was asked), a writable numpy array over it. What pickle cannot
// take (a lambda, a lock) fails that batch with pickle's own exception, in the worker.
// Two torch views of one storage come back as two tensors, not views, as strides do not travel.
//
#include "python/src/convert.hpp"

#include <pybind11/numpy.h>

#include <atomic>
#include <pybind11/stl.h>

#include "base/error.hpp"
#include "core/dlpack.hpp"

namespace actorch::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedName = "used_dltensor";
constexpr const char* kNamedtupleKey = "\x01namedtuple"; // Note [Namedtuples in samples]
constexpr const char* kMappingKey = "\x01mapping";       // ... and other containers'
constexpr const char* kSequenceKey = "\x01sequence";

/// What from_python asks of numpy per sample, looked up once (the interpreter keeps them to
/// its end, so they are never released); `available` is false without numpy.
struct numpy_types {
  bool available = false;
  py::object bool_, generic, ndarray, asarray, array;
};

const numpy_types& numpy() {
  static const numpy_types* np = [] {
    auto* t = new numpy_types;
    try {
      py::module_ m = py::module_::import("numpy");
      *t = {
          true,           m.attr("bool_"), m.attr("generic"), m.attr("ndarray"), m.attr("asarray"),
          m.attr("array")};
    } catch (const py::error_already_set&) {
    }
    return t;
  }();
  return *np;
}

/// torch.from_dlpack, torch.bool and torch.uint8, looked up once, as numpy's above.
struct torch_handles {
  py::object from_dlpack, to_dlpack, bool_, uint8;
  PyTypeObject* tensor_type; // torch.Tensor
};

const torch_handles& torch_functions() {
  static const torch_handles* t = [] {
    py::module_ m = py::module_::import("torch");
    return new torch_handles{
        m.attr("from_dlpack"), m.attr("utils").attr("dlpack").attr("to_dlpack"), m.attr("bool"),
        m.attr("uint8"), reinterpret_cast<PyTypeObject*>(m.attr("Tensor").ptr())};
  }();
  return *t;
}

/// torch.Tensor's type once a sample has held one (null before: torch is not imported for it).
std::atomic<PyTypeObject*> seen_torch_tensor{nullptr};

/// The bool tensor over `bytes`, a uint8 view of a numpy or torch bool array: DLPack 0.6 has
/// no bool type, so bools cross it as bytes.
tensor bools_from_bytes(const py::object& bytes) {
  return tensor_from_dlpack(bytes).to(dtype::bool_);
}

/// A numpy array or scalar as a sample, as torch's default_collate and default_convert take
/// it: numbers and bools as tensors (a read-only array copied, since DLPack cannot say read-only;
/// another byte order made native); arrays of strings, bytes, objects or records as the Python
/// objects they are (converting keeps them; collating a batch of them is an error, as in torch).
data::sample numpy_sample(const py::handle& obj, bool scalar) {
  const numpy_types& np = numpy();
  const py::object dt = obj.attr("dtype");
  const std::string kind = py::str(dt.attr("kind"));
  if (kind == "O" || kind == "U" || kind == "S" || kind == "V")
    return std::make_shared<python_value>(py::reinterpret_borrow<py::object>(obj));
  py::object a = py::reinterpret_borrow<py::object>(obj);
  if (kind == "b")
    return bools_from_bytes(np.asarray(a).attr("view")("uint8"));
  if (!dt.attr("isnative").cast<bool>())
    return tensor_from_dlpack(np.asarray(a).attr("astype")(dt.attr("newbyteorder")("=")));
  if (scalar)
    return tensor_from_dlpack(np.asarray(a));
  if (!a.attr("flags").attr("writeable").cast<bool>())
    return tensor_from_dlpack(np.array(a));
  return tensor_from_dlpack(a);
}

/// An object with __dlpack__ (a torch tensor, a CuPy array) as a sample: a view of its memory.
data::sample dlpack_sample(const py::handle& obj) {
  py::object o = py::reinterpret_borrow<py::object>(obj);
  if (py::hasattr(o, "requires_grad") && o.attr("requires_grad").cast<bool>())
    o = o.attr("detach")(); // torch refuses to export a tensor that requires grad
  if (torch_available()) {
    const torch_handles& torch = torch_functions();
    if (Py_TYPE(obj.ptr()) == torch.tensor_type) // from now on, torch_sample's way
      seen_torch_tensor.store(torch.tensor_type, std::memory_order_relaxed);
    if (py::hasattr(o, "dtype") && py::object(o.attr("dtype")).is(torch.bool_))
      return bools_from_bytes(o.attr("view")(torch.uint8));
  }
  return tensor_from_dlpack(o);
}

/// A torch.Tensor (of that exact type) as a sample: a CPU one that needs no detach and is not
/// bool straight through torch.utils.dlpack.to_dlpack, less dlpack_sample's lookups and
/// __dlpack__'s Python wrapper (a dataset's most common sample, one per field per sample: 2.8
/// against 3.3 us a sample with it); any other through dlpack_sample (a CUDA one's __dlpack__
/// orders the export after the current stream's work).
data::sample torch_sample(const py::handle& obj) {
  const torch_handles& torch = torch_functions();
  if (PyObject_IsTrue(obj.attr("is_cuda").ptr()) ||
      PyObject_IsTrue(obj.attr("requires_grad").ptr()) ||
      py::object(obj.attr("dtype")).is(torch.bool_))
    return dlpack_sample(obj);
  return tensor_from_dlpack(torch.to_dlpack(obj));
}

/// A Python int as a sample's int64, or an error naming it when it does not fit (torch's
/// default_collate fails on it too: "Overflow when unpacking long").
int64_t int64_of(PyObject* p) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
  ACTORCH_CHECK(overflow == 0, "a sample holds the int ", std::string(py::str(py::handle(p))),
                ", outside int64's range, which actorch's batches hold; make it a float or a str");
  if (v == -1 && PyErr_Occurred())
    throw py::error_already_set();
  return int64_t(v);
}

/// "module:qualname" of obj's type, for class_named (Note [Namedtuples in samples]).
std::string type_name_of(const py::handle& obj) {
  const py::handle type = py::type::of(obj);
  return py::str(type.attr("__module__")).cast<std::string>() + ":" +
         py::str(type.attr("__qualname__")).cast<std::string>();
}

/// collections.abc's Mapping and Sequence, looked up once (never freed).
const std::pair<py::object, py::object>& abc_containers() {
  static auto* abc = [] {
    const py::module_ m = py::module_::import("collections.abc");
    return new std::pair<py::object, py::object>(m.attr("Mapping"), m.attr("Sequence"));
  }();
  return *abc;
}

/// A dict, or another mapping with its type's name first (`typed`; Note [Namedtuples in
/// samples]), as a sample's dict: str keys only.
data::sample mapping_sample(const py::handle& obj, bool typed) {
  data::sample::dict items;
  if (typed)
    items.emplace_back(kMappingKey, type_name_of(obj));
  const auto add = [&](const py::handle& key, const py::handle& value) {
    ACTORCH_CHECK(py::isinstance<py::str>(key), "a sample's ",
                  typed ? std::string(py::str(py::type::of(obj))) : std::string("dict"),
                  " has a key of type ", std::string(py::str(py::type::of(key))), " (",
                  std::string(py::repr(key)), "); actorch's batches take str keys only");
    items.emplace_back(key.cast<std::string>(), from_python(value));
  };
  if (PyDict_CheckExact(obj.ptr())) {
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(obj))
      add(key, value);
  } else { // its own __iter__ and __getitem__, as torch's `{key: d[key] for key in elem}`
    for (const py::handle key : obj)
      add(key, obj[key]);
  }
  return items;
}

/// The items of a tuple or list (a subclass too, but for namedtuples), as a sample's tuple.
data::sample sequence_sample(PyObject* p) {
  data::sample::tuple items;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(p);
  items.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    items.push_back(from_python(PySequence_Fast_GET_ITEM(p, i)));
  return items;
}

py::object class_named(const std::string& name) {
  const size_t colon = name.find(':');
  if (colon == std::string::npos)
    return py::none();
  try {
    py::object cls = py::module_::import(name.substr(0, colon).c_str());
    std::string rest = name.substr(colon + 1);
    for (size_t at = 0; at <= rest.size();) {
      const size_t dot = std::min(rest.find('.', at), rest.size());
      cls = cls.attr(rest.substr(at, dot - at).c_str());
      at = dot + 1;
    }
    return cls;
  } catch (const py::error_already_set&) {
    return py::none();
  }
}

} // namespace

py::capsule to_capsule(const tensor& t) {
  DLManagedTensor* m = to_dlpack(t);
  return py::capsule(m, kCapsuleName, [](PyObject* capsule) {
    // Not consumed (its name is still "dltensor"): the producer's memory is released here.
    if (PyCapsule_IsValid(capsule, kCapsuleName)) {
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
      if (managed && managed->deleter)
        managed->deleter(managed);
    }
  });
}

tensor tensor_from_dlpack(const py::object& obj) {
  py::object capsule = obj;
  if (!PyCapsule_CheckExact(obj.ptr()) && py::hasattr(obj, "__dlpack__"))
    capsule = obj.attr("__dlpack__")();
  ACTORCH_CHECK(PyCapsule_IsValid(capsule.ptr(), kCapsuleName),
                "from_dlpack: expected an object with __dlpack__ or an unused 'dltensor' capsule, "
                "got ",
                std::string(py::str(py::type::of(obj))));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  // The producer's deleter runs under gil_lock: torch's takes the GIL itself, inside a destructor
  // that may not unwind, on whichever thread drops the last view (a loader worker's); a thread
  // that meets the interpreter's end there must be parked first (Note [Threads that meet the
  // interpreter's end]).
  auto* guarded = new DLManagedTensor{m->dl_tensor, m, [](DLManagedTensor* self) {
                                        auto* inner =
                                            static_cast<DLManagedTensor*>(self->manager_ctx);
                                        if (inner->deleter) {
                                          gil_lock gil;
                                          inner->deleter(inner);
                                        }
                                        delete self;
                                      }};
  tensor t;
  try {
    t = from_dlpack(guarded);
  } catch (...) { // not taken: the capsule still deletes m
    delete guarded;
    throw;
  }
  PyCapsule_SetName(capsule.ptr(), kUsedName);
  return t;
}

bool torch_available() {
  static const bool available = [] {
    try {
      py::module_::import("torch");
      return true;
    } catch (const py::error_already_set&) {
      return false;
    }
  }();
  return available;
}

python_value::python_value(py::object o)
    : obj_(std::move(o)), type_name_(py::str(py::type::of(obj_))),
      is_bytes_(PyBytes_Check(obj_.ptr())) {}

python_value::~python_value() {
  gil_lock gil;
  obj_ = py::object();
}

std::string python_value::type_name() const {
  return type_name_;
}

void python_value::for_each_tensor(const std::function<void(tensor&)>& /*f*/) {}

namespace {

constexpr const char* kPythonCodec = "python-pickle"; // Note [Python objects across processes]
constexpr const char* kBytesCodec = "python-bytes";   // bytes as they are, no pickle

/// actorch.data._wire's dumps and loads, looked up once per process (kept to its end, as
/// numpy's handles are): each batch that leaves a worker process calls them.
struct wire_functions {
  py::object dumps, loads;
};

const wire_functions& wire() {
  static const wire_functions* w = [] {
    py::module_ m = py::module_::import("actorch.data._wire");
    return new wire_functions{m.attr("dumps"), m.attr("loads")};
  }();
  return *w;
}

/// A python_value as a worker process sent it: rebuilt by to_python, which has the GIL.
class pickled_value : public data::custom_value {
public:
  explicit pickled_value(data::custom_wire w) : wire_(std::move(w)) {}
  std::string type_name() const override {
    return is_bytes() ? "<class 'bytes'>" : "pickled Python object";
  }
  bool collates_as_sequence() const override { return is_bytes(); }
  void for_each_tensor(const std::function<void(tensor&)>& f) override {
    for (tensor& t : wire_.tensors)
      f(t);
  }
  py::object load(bool as_torch) const;

private:
  bool is_bytes() const { return wire_.codec == kBytesCodec; }
  data::custom_wire wire_;
};

/// A writable numpy array over t's memory, holding t.
py::object numpy_over(const tensor& t) {
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end()), strides;
  for (const int64_t s : t.strides())
    strides.push_back(py::ssize_t(s * int64_t(element_size(t.dtype()))));
  return py::array(py::dtype(std::string(dtype_name(t.dtype()))), shape, strides, t.data_ptr(),
                   py::cast(t));
}

} // namespace

std::optional<data::custom_wire> python_value::to_wire() const {
  gil_lock gil;
  if (is_bytes_)
    return data::custom_wire{
        kBytesCodec, std::string(PyBytes_AS_STRING(obj_.ptr()), PyBytes_GET_SIZE(obj_.ptr())), {}};
  try {
    py::list arrays;
    const py::bytes pickled = wire().dumps(obj_, arrays);
    data::custom_wire w{kPythonCodec, std::string(pickled), {}};
    w.tensors.reserve(arrays.size());
    for (const py::handle a : arrays)
      w.tensors.push_back(from_python(a).as_tensor());
    return w;
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "a batch holding a " + type_name_ +
                                " cannot leave its worker process, as pickle says: ");
  }
}

void register_python_codec() {
  for (const char* codec : {kPythonCodec, kBytesCodec})
    data::register_custom_codec(
        codec, [](data::custom_wire w) { return std::make_shared<pickled_value>(std::move(w)); });
}

/// Whether `s` is what default_collate makes of strings or bytes: the samples as they are, the
/// first a string or bytes (the others may be anything: torch returns such a batch as it is).
/// No other collated tuple starts with one: a tuple's collated elements are batches.
bool strings_batch(const data::sample& s) {
  if (s.size() == 0)
    return false;
  const data::sample& first = s[0];
  return first.type() == data::sample::kind::string ||
         (first.type() == data::sample::kind::custom && first.as_custom()->collates_as_sequence());
}

namespace {

/// cls(values), or values where cls does not take them (raises TypeError), as torch's
/// default_collate rebuilds a container.
py::object rebuilt_or(const py::object& cls, const py::object& values) {
  try {
    return cls(values);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError))
      throw;
    return values;
  }
}

/// to_python; `in_sequence`: s is an element of a tuple or namedtuple (see kind::tuple).
py::object to_python(const data::sample& s, const to_python_options& o, bool in_sequence) {
  using form = to_python_options::form;
  using kind = data::sample::kind;
  switch (s.type()) {
  case kind::none: return py::none();
  case kind::tensor: {
    const tensor& t = s.as_tensor();
    if (o.as_torch) {
      const torch_handles& torch = torch_functions();
      if (t.dtype() == dtype::bool_) // DLPack 0.6 has no bool: across as bytes, then a view
        return torch.from_dlpack(py::cast(t.to(dtype::uint8))).attr("view")(torch.bool_);
      return torch.from_dlpack(py::cast(t));
    }
    return py::cast(t);
  }
  case kind::integer: return py::int_(s.as_int());
  case kind::floating: return py::float_(s.as_double());
  case kind::boolean: return py::bool_(s.as_bool());
  case kind::string: return py::str(s.as_string());
  case kind::tuple: {
    // torch 1.13's default_collate hands strings back in what held them: the tuple zip()
    // made of a sequence's elements, the list a dict's value or the batch itself was; other
    // sequences become lists (so does default_convert).
    const bool as_list =
        o.as == form::converted || (o.as == form::collated && !(in_sequence && strings_batch(s)));
    if (as_list) {
      py::list out(s.size());
      for (size_t i = 0; i < s.size(); ++i)
        out[i] = to_python(s[i], o, true);
      return out;
    }
    py::tuple out(s.size());
    for (size_t i = 0; i < s.size(); ++i)
      out[i] = to_python(s[i], o, true);
    return out;
  }
  case kind::dict: {
    const auto& items = s.as_dict();
    const std::string& marker = items.empty() ? std::string() : items[0].first;
    if (marker == kNamedtupleKey || marker == kMappingKey || marker == kSequenceKey) {
      // Note [Namedtuples in samples]
      // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
      // The type's name, collated to equal strings in a batch
      const data::sample& name = items[0].second;
      py::object cls = class_named(name.type() == kind::string ? name.as_string()
                                   : name.size() > 0           ? name[0].as_string()
                                                               : std::string());
      if (marker == kSequenceKey) {
        py::list values(items.size() - 1);
        for (size_t i = 1; i < items.size(); ++i)
          values[i - 1] = to_python(items[i].second, o, true);
        return cls.is_none() ? py::object(values) : rebuilt_or(cls, values);
      }
      const bool fields = marker == kNamedtupleKey;
      py::dict values;
      for (size_t i = 1; i < items.size(); ++i)
        values[py::str(items[i].first)] = to_python(items[i].second, o, fields);
      if (cls.is_none())
        return values;
      return fields ? cls(**values) : rebuilt_or(cls, values);
    }
    py::dict out;
    for (const auto& [key, value] : items)
      out[py::str(key)] = to_python(value, o, false);
    return out;
  }
  case kind::custom: {
    if (auto* v = dynamic_cast<python_value*>(s.as_custom().get()))
      return v->object();
    if (auto* v = dynamic_cast<pickled_value*>(s.as_custom().get()))
      return v->load(o.as_torch);
    ACTORCH_FAIL("a ", s.as_custom()->type_name(),
                 " (a C++ batch type of its own) has no Python form; make the batch of "
                 "tensors, numbers, strings, tuples and dicts for Python");
  }
  }
  return py::none();
}

} // namespace

py::object to_python(const data::sample& s, const to_python_options& o) {
  return to_python(s, o, false);
}

py::object pickled_value::load(bool as_torch) const {
  if (is_bytes())
    return py::bytes(wire_.bytes);
  py::list arrays;
  for (const tensor& t : wire_.tensors)
    arrays.append(py::cast(t));
  const py::cpp_function convert([as_torch](const tensor& t, const std::string& kind) {
    if (kind == "numpy")
      return numpy_over(t);
    to_python_options o;
    o.as_torch = as_torch;
    return to_python(data::sample(t), o, false);
  });
  return wire().loads(py::bytes(wire_.bytes), arrays, convert);
}

data::sample from_python(const py::handle& obj) {
  // The types a dataset returns most, by exact type first: each pybind11 isinstance costs a
  // lookup, per sample (bool before int: a bool is an int to Python).
  PyObject* p = obj.ptr();
  if (PyLong_CheckExact(p))
    return int64_of(p);
  if (PyFloat_CheckExact(p))
    return PyFloat_AS_DOUBLE(p);
  if (PyTuple_CheckExact(p) || PyList_CheckExact(p))
    return sequence_sample(p);
  if (Py_TYPE(p) == seen_torch_tensor.load(std::memory_order_relaxed))
    return torch_sample(obj);
  if (obj.is_none())
    return {};
  if (py::isinstance<tensor>(obj))
    return obj.cast<tensor>();
  if (PyBool_Check(p))
    return p == Py_True;
  if (const numpy_types& np = numpy(); np.available) {
    if (py::isinstance(obj, np.bool_))
      return obj.cast<bool>();
    if (py::isinstance<py::str>(obj)) // np.str_ (a str): a string, as default_collate takes it
      return obj.cast<std::string>();
    const bool scalar = py::isinstance(obj, np.generic); // np.float64 is a float too
    if (scalar || py::isinstance(obj, np.ndarray))
      return numpy_sample(obj, scalar);
  }
  if (py::isinstance<py::int_>(obj))
    return int64_of(p);
  if (py::isinstance<py::float_>(obj))
    return obj.cast<double>();
  if (py::isinstance<py::str>(obj))
    return obj.cast<std::string>();
  if (py::isinstance<py::tuple>(obj) && py::hasattr(obj, "_fields")) {
    // Note [Namedtuples in samples]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    data::sample::dict items;
    items.emplace_back(kNamedtupleKey, type_name_of(obj));
    const py::tuple fields = obj.attr("_fields");
    const py::tuple values = py::reinterpret_borrow<py::tuple>(obj);
    for (size_t i = 0; i < fields.size(); ++i)
      items.emplace_back(fields[i].cast<std::string>(), from_python(values[i]));
    return items;
  }
  if (PyTuple_Check(p)) // a subclass (torch.Size): a list in a batch, as torch's
    return sequence_sample(p);
  if (PyDict_CheckExact(p))
    return mapping_sample(obj, false);
  if (py::hasattr(obj, "__dlpack__"))
    return dlpack_sample(obj);
  // Note [Namedtuples in samples]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Other containers keep their type by name
  const auto& [mapping, sequence] = abc_containers();
  if (PyDict_Check(p) || py::isinstance(obj, mapping))
    return mapping_sample(obj, true);
  if (!PyBytes_Check(p) && !PyByteArray_Check(p) && py::isinstance(obj, sequence)) {
    data::sample::dict items;
    items.emplace_back(kSequenceKey, type_name_of(obj));
    const py::list values(py::reinterpret_borrow<py::object>(obj));
    for (size_t i = 0; i < values.size(); ++i)
      items.emplace_back(std::to_string(i), from_python(values[i]));
    return items;
  }
  return std::make_shared<python_value>(py::reinterpret_borrow<py::object>(obj));
}

void rethrow_python_error(py::error_already_set& e, const std::string& context) {
  // Note [Python exceptions across workers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A C function's exception (len() of an object without __len__) may have no traceback.
  const py::object type = e.type(), value = e.value(),
                   trace = e.trace() ? e.trace() : py::object(py::none());
  std::string text = context + py::str(type.attr("__name__")).cast<std::string>();
  const std::string message = py::str(value);
  if (!message.empty())
    text += ": " + message;
  text += "\n(Python exception type " + py::str(type.attr("__module__")).cast<std::string>() + ":" +
          py::str(type.attr("__qualname__")).cast<std::string>() +
          "; the worker's traceback follows)\n";
  try {
    const py::list lines =
        py::module_::import("traceback").attr("format_exception")(type, value, trace);
    for (const py::handle line : lines)
      text += line.cast<std::string>();
  } catch (const py::error_already_set&) {
    text += "(its traceback could not be formatted)\n";
  }
  throw actorch::error(text);
}

} // namespace actorch::python
