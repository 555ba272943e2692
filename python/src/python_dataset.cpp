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
#include "python/src/python_dataset.hpp"

#include <pybind11/stl.h>

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

std::vector<int64_t> index_list(const py::handle& items, const char* who) {
  std::vector<int64_t> out;
  for (const py::handle i : items) {
    ACTORCH_CHECK(PyIndex_Check(i.ptr()), who, " yielded a ", std::string(py::str(py::type::of(i))),
                  " (", std::string(py::repr(i)), "); indices are ints");
    out.push_back(py::reinterpret_borrow<py::int_>(PyNumber_Index(i.ptr())).cast<int64_t>());
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

python_map_dataset::python_map_dataset(py::object obj, bool opaque)
    : obj_(std::make_shared<gil_object>(obj)), size_(python_len(obj, "the dataset")),
      opaque_(opaque) {}

data::sample python_map_dataset::get(int64_t index) const {
  gil_lock gil;
  try {
    return take(obj_->obj[py::int_(index)], opaque_);
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "");
  }
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

python_sampler::python_sampler(py::object obj)
    : obj_(std::make_shared<gil_object>(std::move(obj))) {}

int64_t python_sampler::size() const {
  gil_lock gil;
  return python_len(obj_->obj, "the sampler");
}

std::vector<int64_t> python_sampler::indices() {
  gil_lock gil;
  try {
    return index_list(py::iter(obj_->obj), "the sampler");
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "the sampler failed: ");
  }
}

python_batch_sampler::python_batch_sampler(py::object obj)
    : obj_(std::make_shared<gil_object>(std::move(obj))) {}

int64_t python_batch_sampler::size() const {
  gil_lock gil;
  return python_len(obj_->obj, "the batch_sampler");
}

std::vector<std::vector<int64_t>> python_batch_sampler::batches() {
  gil_lock gil;
  try {
    std::vector<std::vector<int64_t>> out;
    for (const py::handle batch : py::iter(obj_->obj))
      out.push_back(index_list(batch, "the batch_sampler"));
    return out;
  } catch (py::error_already_set& e) {
    rethrow_python_error(e, "the batch_sampler failed: ");
  }
}

} // namespace actorch::python
