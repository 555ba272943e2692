// A user's Python dataset, sampler and batch sampler for the C++ loader (python_dataset.hpp).
//
// Note [Python datasets]
// ~~~~~~~~~~~~~~~~~~~~~~
// The loader calls get() on its workers' threads, several at once, or in worker processes
// (multiprocessing_context "fork"), or on the consumer's thread with num_workers = 0. Each call
// takes the GIL, calls into Python and turns the result into a sample (from_python) before it
// lets go, so the collate that follows runs in C++ without the GIL: in a worker process it
// writes the batch straight into the shared file the parent maps, and no tensor is pickled.
// With worker threads the GIL serialises the Python code but not the numpy work that releases
// it, nor the collate. A Python exception becomes an actorch::error carrying its type and
// traceback (Note [Python exceptions across workers] in convert.cpp).
//
// Note [Sampler keys]
// ~~~~~~~~~~~~~~~~~~~
// torch's loader hands __getitem__ whatever the sampler yields: names of records, YOLOX's
// (mosaic, index) tuples, negative ints. actorch's loader carries int64 indices in its plan, its
// tasks and its worker processes' frames, so a Python sampler's adapter gives every item that is
// not an int in [0, len(dataset)) an index from len(dataset) up (sampler_keys), which the dataset
// maps back in get(). Ints in range stay themselves, so the common case costs nothing. The table
// holds one epoch's keys: each plan (a sampler's iteration) starts it again, and indices are not
// reused, so a task of an abandoned epoch finds no key rather than another one (its index goes
// to __getitem__ as an int, as does one past len(dataset) from an actorch C++ sampler, which
// torch passes on too; nobody takes the abandoned batch). Worker threads
// and the no-worker path share the table; a worker process's copy (forked before the keys
// existed, or spawned) learns each batch's keys from its task (index_batch::keys), pickled by the
// worker that hands it over, as torch pickles indices into its workers' queues. The C++ datasets
// take ints in range only, as before: their loaders' adapters have no table.
#include "python/src/python_dataset.hpp"

#include <pybind11/stl.h>

#include <algorithm>

#include "base/error.hpp"

namespace actorch::python {

namespace {

/// A Python object as a sample: converted, or held as it is (`opaque`).
data::sample take(py::object obj, bool opaque) {
  if (opaque)
    return std::make_shared<python_value>(std::move(obj));
  return from_python(obj);
}

class python_sample_iterator : public data::sample_iterator {
public:
  python_sample_iterator(py::object it, bool opaque)
      : it_(std::make_shared<gil_object>(std::move(it))), opaque_(opaque) {}
  std::optional<data::sample> next() override {
    gil_lock gil;
    PyObject* item = PyIter_Next(it_->obj.ptr());
    if (item == nullptr) {
      if (PyErr_Occurred()) {
        py::error_already_set e;
        rethrow_python_error(e, "");
      }
      return std::nullopt;
    }
    try {
      return take(py::reinterpret_steal<py::object>(item), opaque_);
    } catch (py::error_already_set& e) {
      rethrow_python_error(e, "");
    }
  }

private:
  std::shared_ptr<gil_object> it_;
  bool opaque_;
};

py::module_& pickle() {
  static py::module_* m = new py::module_(py::module_::import("pickle")); // never freed
  return *m;
}

std::vector<int64_t> index_list(const py::handle& items, const char* who, sampler_keys* keys) {
  std::vector<int64_t> out;
  for (const py::handle i : items) {
    if (keys) {
      out.push_back(keys->index_of(i));
      continue;
    }
    ACTORCH_CHECK(PyIndex_Check(i.ptr()), who, " yielded a ", std::string(py::str(py::type::of(i))),
                  " (", std::string(py::repr(i)), "); indices are ints");
    out.push_back(py::reinterpret_steal<py::int_>(PyNumber_Index(i.ptr())).cast<int64_t>());
  }
  return out;
}

int64_t python_len(const py::object& obj, const char* who) {
  try {
    return int64_t(py::len(obj));
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, std::string(who) + ": len() failed: ");
  }
}

} // namespace

sampler_keys::sampler_keys(int64_t size)
    : size_(size), next_(size), table_(std::make_shared<gil_object>(py::dict())) {}

int64_t sampler_keys::index_of(const py::handle& key) {
  PyObject* p = key.ptr();
  if (PyIndex_Check(p)) {
    const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(p));
    if (!i)
      throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0 && v >= 0 && v < size_)
      return int64_t(v);
  }
  const int64_t index = next_++;
  table_->obj[py::int_(index)] = key;
  return index;
}

void sampler_keys::clear() {
  table_->obj.attr("clear")();
}

PyObject* sampler_keys::held(int64_t index) const {
  return index < size_ ? nullptr : PyDict_GetItem(table_->obj.ptr(), py::int_(index).ptr());
}

py::object sampler_keys::key(int64_t index) const {
  PyObject* key = held(index);
  // Not a key: the index itself, as torch passes it on (an actorch C++ sampler's past the
  // dataset's length; a stale one of an abandoned epoch, whose batch nobody takes)
  return key ? py::reinterpret_borrow<py::object>(key) : py::int_(index);
}

std::string sampler_keys::encode(const std::vector<int64_t>& indices) const {
  if (std::none_of(indices.begin(), indices.end(), [&](int64_t i) { return i >= size_; }))
    return {};
  gil_lock gil;
  try {
    py::list pairs;
    for (const int64_t i : indices)
      if (i >= size_)
        pairs.append(py::make_tuple(i, key(i)));
    return std::string(pickle().attr("dumps")(pairs).cast<py::bytes>());
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "cannot pickle the sampler's keys for a worker process: ");
  }
}

void sampler_keys::learn(std::string_view encoded) {
  gil_lock gil;
  try {
    py::object table = py::dict();
    for (const py::handle pair : pickle().attr("loads")(py::bytes(encoded.data(), encoded.size())))
      table[pair[py::int_(0)]] = pair[py::int_(1)];
    table_->obj = std::move(table); // one batch's keys at a time: this process loads it alone
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "cannot unpickle the sampler's keys: ");
  }
}

std::string sampler_keys::name(int64_t index) const {
  gil_lock gil;
  try {
    if (PyObject* key = held(index))
      return "key " + std::string(py::repr(key));
  } catch (py::error_already_set&) { // a __repr__ that raises: the index, then
  }
  return "index " + std::to_string(index);
}

python_map_dataset::python_map_dataset(py::object obj, bool opaque)
    : obj_(std::make_shared<gil_object>(obj)), size_(python_len(obj, "the dataset")),
      opaque_(opaque),
      // torch's test: the attribute, and truthy (a subclass may set it to None to opt out)
      getitems_(py::hasattr(obj, "__getitems__") && py::bool_(obj.attr("__getitems__"))),
      keys_(std::make_shared<sampler_keys>(size_)) {}

data::sample python_map_dataset::get(int64_t index) const {
  gil_lock gil;
  try {
    return take(obj_->obj[keys_->key(index)], opaque_);
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "");
  }
}

std::vector<data::sample> python_map_dataset::get_many(const std::vector<int64_t>& indices) const {
  gil_lock gil;
  try {
    py::list keys;
    for (const int64_t i : indices)
      keys.append(keys_->key(i));
    std::vector<data::sample> out;
    out.reserve(indices.size());
    for (const py::handle s : obj_->obj.attr("__getitems__")(keys))
      out.push_back(take(py::reinterpret_borrow<py::object>(s), opaque_));
    return out;
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "");
  }
}

std::string python_map_dataset::keys_of(const std::vector<int64_t>& indices) const {
  return keys_->encode(indices);
}

void python_map_dataset::learn_keys(std::string_view encoded) const {
  keys_->learn(encoded);
}

std::string python_map_dataset::index_name(int64_t index) const {
  return keys_->name(index);
}

python_iterable_dataset::python_iterable_dataset(py::object obj, bool opaque)
    : obj_(std::make_shared<gil_object>(std::move(obj))), opaque_(opaque) {}

std::unique_ptr<data::sample_iterator> python_iterable_dataset::iter() const {
  gil_lock gil;
  try {
    return std::make_unique<python_sample_iterator>(py::iter(obj_->obj), opaque_);
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "iter(dataset) failed: ");
  }
}

python_sampler::python_sampler(py::object obj, std::shared_ptr<sampler_keys> keys)
    : obj_(std::make_shared<gil_object>(std::move(obj))), keys_(std::move(keys)) {}

int64_t python_sampler::size() const {
  gil_lock gil;
  return python_len(obj_->obj, "the sampler");
}

std::vector<int64_t> python_sampler::indices() {
  gil_lock gil;
  try {
    if (keys_)
      keys_->clear(); // a new epoch's keys (Note [Sampler keys])
    return index_list(py::iter(obj_->obj), "the sampler", keys_.get());
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "the sampler failed: ");
  }
}

python_batch_sampler::python_batch_sampler(py::object obj, std::shared_ptr<sampler_keys> keys)
    : obj_(std::make_shared<gil_object>(std::move(obj))), keys_(std::move(keys)) {}

int64_t python_batch_sampler::size() const {
  gil_lock gil;
  return python_len(obj_->obj, "the batch_sampler");
}

std::vector<std::vector<int64_t>> python_batch_sampler::batches() {
  gil_lock gil;
  try {
    if (keys_)
      keys_->clear(); // a new epoch's keys (Note [Sampler keys])
    std::vector<std::vector<int64_t>> out;
    for (const py::handle batch : py::iter(obj_->obj))
      out.push_back(index_list(batch, "the batch_sampler", keys_.get()));
    return out;
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "the batch_sampler failed: ");
  }
}

} // namespace actorch::python
