// The Python module `actorch` (pybind11): actorch's tensors and data loader for PyTorch users.
//   actorch.Tensor        __dlpack__ / __dlpack_device__: numpy.from_dlpack and
//                         torch.from_dlpack take it without a copy
//   actorch.from_dlpack   any object with __dlpack__ (a numpy array, a torch tensor), or a capsule
//   actorch.data          NpyDataset, DigitsDataset, TensorDataset (over arrays, zero-copy),
//                         TransformedDataset, SQLiteSource (the example source actor), and the
//                         samplers: Sequential, Random, SubsetRandom, WeightedRandom,
//                         Distributed, Batch
//   actorch.transforms    Compose, Normalize, RandomCrop, CenterCrop, Resize, RandomHorizontalFlip,
//                         Lambda (a Python function: under the GIL)
//   actorch.DataLoader    PyTorch's arguments; yields batches whose tensors are actorch.Tensor,
//                         or torch tensors (zero-copy) when torch is importable
// See Note [Python module] below.
//
// Note [Python module]
// ~~~~~~~~~~~~~~~~~~~~
// The loader runs in C++: its workers are actor threads that never touch Python unless the
// user gave a Python collate_fn or worker_init_fn, which run under the GIL (the slow path:
// they serialize the workers). The iterator releases the GIL while it waits for a batch, so
// other Python threads run. A batch's tensors are handed out as actorch.Tensor objects holding
// the batch buffer: the buffer goes back to the loader's pool only when Python drops the last
// of them (and a DLPack consumer, like torch, releases its capsule), so a batch kept past the
// next iteration stays valid. A capsule not consumed calls the DLPack deleter itself, as
// PyTorch's do.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "actors/data_loader.hpp"
#include "actors/source_loader.hpp"
#include "core/data/batch_sampler.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/data/npy_dataset.hpp"
#include "core/data/sampler.hpp"
#include "core/data/transforms.hpp"
#include "core/dlpack.hpp"
#include "core/ops/factory.hpp"
#include "examples/sqlite_source.hpp"

namespace py = pybind11;
using namespace actorch;

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedName = "used_dltensor";

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

/// actorch.from_dlpack: a capsule, or an object with __dlpack__.
tensor tensor_from_dlpack(const py::object& obj) {
  py::object capsule = obj;
  if (py::hasattr(obj, "__dlpack__"))
    capsule = obj.attr("__dlpack__")();
  ACTORCH_CHECK(PyCapsule_IsValid(capsule.ptr(), kCapsuleName),
                "from_dlpack: expected an object with __dlpack__ or an unused 'dltensor' capsule, "
                "got ",
                std::string(py::str(py::type::of(obj))));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  tensor t = from_dlpack(m); // throws without taking m: the capsule still deletes it
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

/// A batch's sample as Python objects: tuples, dicts, numbers, strings; tensors as
/// actorch.Tensor, or torch tensors when `as_torch`.
py::object to_python(const data::sample& s, bool as_torch) {
  using kind = data::sample::kind;
  switch (s.type()) {
  case kind::none: return py::none();
  case kind::tensor: {
    py::object t = py::cast(s.as_tensor());
    if (as_torch)
      return py::module_::import("torch").attr("from_dlpack")(t);
    return t;
  }
  case kind::integer: return py::int_(s.as_int());
  case kind::floating: return py::float_(s.as_double());
  case kind::boolean: return py::bool_(s.as_bool());
  case kind::string: return py::str(s.as_string());
  case kind::tuple: {
    py::tuple out(s.size());
    for (size_t i = 0; i < s.size(); ++i)
      out[i] = to_python(s[i], as_torch);
    return out;
  }
  case kind::dict: {
    py::dict out;
    for (const auto& [key, value] : s.as_dict())
      out[py::str(key)] = to_python(value, as_torch);
    return out;
  }
  case kind::custom:
    ACTORCH_FAIL("a ", s.as_custom()->type_name(),
                 " (a C++ batch type of its own) has no Python form; make the batch of "
                 "tensors, numbers, strings, tuples and dicts for Python");
  }
  return py::none();
}

/// A Python value as a sample: tensors through DLPack (numpy arrays, torch tensors,
/// actorch.Tensor), numbers, strings, tuples and lists, dicts with string keys.
data::sample from_python(const py::handle& obj) {
  if (obj.is_none())
    return {};
  if (py::isinstance<tensor>(obj))
    return obj.cast<tensor>();
  if (py::isinstance<py::bool_>(obj))
    return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj))
    return obj.cast<int64_t>();
  if (py::isinstance<py::float_>(obj))
    return obj.cast<double>();
  if (py::isinstance<py::str>(obj))
    return obj.cast<std::string>();
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    data::sample::tuple items;
    for (const py::handle item : obj)
      items.push_back(from_python(item));
    return items;
  }
  if (py::isinstance<py::dict>(obj)) {
    data::sample::dict items;
    for (const auto& [key, value] : obj.cast<py::dict>())
      items.emplace_back(key.cast<std::string>(), from_python(value));
    return items;
  }
  if (py::hasattr(obj, "__dlpack__"))
    return tensor_from_dlpack(py::reinterpret_borrow<py::object>(obj));
  ACTORCH_FAIL("actorch: cannot take a ", std::string(py::str(py::type::of(obj))),
               " into a sample (tensors, numbers, strings, tuples, lists and dicts can)");
}

/// A Python object that a thread without the GIL may drop last (a collate_fn held by the
/// loader's workers): it takes the GIL to let go of it.
struct gil_object {
  explicit gil_object(py::object o) : obj(std::move(o)) {}
  ~gil_object() {
    py::gil_scoped_acquire gil;
    obj = py::object();
  }
  py::object obj;
};

/// A loader owned by Python: destroyed without the GIL, since its shutdown waits for workers
/// that may need the GIL (a Python collate_fn) to finish.
std::shared_ptr<data::data_loader> python_owned(data::data_loader loader) {
  return std::shared_ptr<data::data_loader>(new data::data_loader(std::move(loader)),
                                            [](data::data_loader* p) {
                                              std::optional<py::gil_scoped_release> no_gil;
                                              if (PyGILState_Check())
                                                no_gil.emplace();
                                              delete p;
                                            });
}

/// The SQLite example's source actor in an actor system of its own, which lives as long as any
/// loader over it.
struct sqlite_source {
  explicit sqlite_source(std::string p)
      : path(std::move(p)), size(examples::sqlite_sample_count(path)), sys(cfg),
        actor(examples::spawn_sqlite_source(sys, path)) {}
  ~sqlite_source() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }
  std::string path;
  int64_t size;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  actors::source_actor actor;
};

/// A transform as Python holds it: the C++ function, which runs on the workers without the GIL
/// (unless it is a Lambda over Python code).
struct py_transform {
  data::transforms::transform fn;
};

std::shared_ptr<generator> generator_of(std::optional<uint64_t> seed) {
  return seed ? std::make_shared<generator>(*seed) : nullptr;
}

/// The Python iterator over one epoch of a loader.
class loader_iterator {
public:
  loader_iterator(std::shared_ptr<data::data_loader> loader, bool as_torch)
      : loader_(std::move(loader)), as_torch_(as_torch) {}
  py::object next() {
    {
      py::gil_scoped_release no_gil; // Note [Python module]
      if (!it_)
        it_ = loader_->begin();
      else if (*it_ != loader_->end())
        ++*it_;
    }
    if (*it_ == loader_->end())
      throw py::stop_iteration();
    return to_python(**it_, as_torch_);
  }

private:
  std::shared_ptr<data::data_loader> loader_;
  std::optional<data::data_loader::iterator> it_;
  bool as_torch_;
};

} // namespace

PYBIND11_MODULE(actorch, m) {
  m.doc() = "actorch: actor-based data loading and tensors for PyTorch users";
  py::register_exception<actorch::error>(m, "Error", PyExc_RuntimeError);

  py::class_<tensor>(m, "Tensor")
      .def_property_readonly("shape",
                             [](const tensor& t) { return py::tuple(py::cast(t.sizes())); })
      .def_property_readonly("dtype",
                             [](const tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def(
          "__dlpack__", [](const tensor& t, py::object /*stream*/) { return to_capsule(t); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const tensor& t) {
             if (t.device().is_cuda())
               return py::make_tuple(int(kDLCUDA), t.device().index);
             return py::make_tuple(int(kDLCPU), 0);
           })
      .def("item",
           [](const tensor& t) -> py::object {
             if (is_floating_point(t.dtype()))
               return py::float_(t.item<double>());
             return py::int_(t.item<int64_t>());
           })
      .def("__int__", [](const tensor& t) { return t.item<int64_t>(); })
      .def("__index__", [](const tensor& t) { return t.item<int64_t>(); })
      .def("__float__", [](const tensor& t) { return t.item<double>(); })
      .def("__repr__", [](const tensor& t) { return t.str(); })
      .def("float", &tensor::to_float)
      .def("double", &tensor::to_double)
      .def("half", &tensor::to_half)
      .def("long", &tensor::to_long)
      .def("int", &tensor::to_int)
      .def("short", &tensor::to_short)
      .def("__len__", [](const tensor& t) { return t.dim() == 0 ? 0 : t.size(0); });
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("obj"),
        "A tensor over the memory of `obj` (numpy array, torch tensor, capsule), without a copy");
  m.def("arange", [](int64_t n) { return arange(n); });

  auto data_m = m.def_submodule("data", "datasets for DataLoader");
  py::class_<data::dataset, std::shared_ptr<data::dataset>>(data_m, "Dataset")
      .def("__len__", &data::dataset::size)
      .def("__getitem__",
           [](const data::dataset& d, int64_t i) { return to_python(d.get(i), false); });
  py::class_<data::npy_dataset, data::dataset, std::shared_ptr<data::npy_dataset>>(data_m,
                                                                                   "NpyDataset")
      .def(py::init<std::vector<std::string>>(), py::arg("paths"));
  py::class_<data::digits_dataset, data::dataset, std::shared_ptr<data::digits_dataset>>(
      data_m, "DigitsDataset")
      .def(py::init<std::string>(), py::arg("path"));
  py::class_<data::tensor_dataset, data::dataset, std::shared_ptr<data::tensor_dataset>>(
      data_m, "TensorDataset")
      .def(py::init([](const py::args& arrays) {
        std::vector<tensor> tensors;
        for (const py::handle a : arrays)
          tensors.push_back(tensor_from_dlpack(py::reinterpret_borrow<py::object>(a)));
        return std::make_shared<data::tensor_dataset>(std::move(tensors));
      }));

  py::class_<data::transforms::transformed_dataset, data::dataset,
             std::shared_ptr<data::transforms::transformed_dataset>>(data_m, "TransformedDataset")
      .def(py::init([](std::shared_ptr<data::dataset> ds, const py_transform& t,
                       std::optional<py_transform> target) {
             return std::make_shared<data::transforms::transformed_dataset>(
                 std::move(ds), t.fn, target ? target->fn : data::transforms::transform{});
           }),
           py::arg("dataset"), py::arg("transform"), py::arg("target_transform") = py::none());
  py::class_<sqlite_source, std::shared_ptr<sqlite_source>>(data_m, "SQLiteSource")
      .def(py::init<std::string>(), py::arg("path"))
      .def("__len__", [](const sqlite_source& s) { return s.size; });

  py::class_<data::sampler, data::sampler_ptr>(data_m, "Sampler")
      .def("__len__", &data::sampler::size)
      .def("__iter__", [](data::sampler& s) { return py::iter(py::cast(s.indices())); })
      .def("set_epoch", &data::sampler::set_epoch);
  py::class_<data::sequential_sampler, data::sampler, std::shared_ptr<data::sequential_sampler>>(
      data_m, "SequentialSampler")
      .def(py::init([](const data::dataset& d) {
        return std::make_shared<data::sequential_sampler>(d.size());
      }));
  py::class_<data::random_sampler, data::sampler, std::shared_ptr<data::random_sampler>>(
      data_m, "RandomSampler")
      .def(py::init([](const data::dataset& d, bool replacement, std::optional<int64_t> n,
                       std::optional<uint64_t> seed) {
             return std::make_shared<data::random_sampler>(d.size(), replacement, n.value_or(-1),
                                                           generator_of(seed));
           }),
           py::arg("data_source"), py::arg("replacement") = false,
           py::arg("num_samples") = py::none(), py::arg("seed") = py::none());
  py::class_<data::subset_random_sampler, data::sampler,
             std::shared_ptr<data::subset_random_sampler>>(data_m, "SubsetRandomSampler")
      .def(py::init([](std::vector<int64_t> indices, std::optional<uint64_t> seed) {
             return std::make_shared<data::subset_random_sampler>(std::move(indices),
                                                                  generator_of(seed));
           }),
           py::arg("indices"), py::arg("seed") = py::none());
  py::class_<data::weighted_random_sampler, data::sampler,
             std::shared_ptr<data::weighted_random_sampler>>(data_m, "WeightedRandomSampler")
      .def(py::init([](std::vector<double> weights, int64_t n, bool replacement,
                       std::optional<uint64_t> seed) {
             return std::make_shared<data::weighted_random_sampler>(
                 std::move(weights), n, replacement, generator_of(seed));
           }),
           py::arg("weights"), py::arg("num_samples"), py::arg("replacement") = true,
           py::arg("seed") = py::none());
  py::class_<data::distributed_sampler, data::sampler, std::shared_ptr<data::distributed_sampler>>(
      data_m, "DistributedSampler")
      .def(py::init([](const data::dataset& d, std::optional<int64_t> num_replicas,
                       std::optional<int64_t> rank, bool shuffle, uint64_t seed, bool drop_last) {
             return std::make_shared<data::distributed_sampler>(d.size(), num_replicas, rank,
                                                                shuffle, seed, drop_last);
           }),
           py::arg("dataset"), py::arg("num_replicas") = py::none(), py::arg("rank") = py::none(),
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("drop_last") = false);
  py::class_<data::batch_sampler, data::batch_sampler_ptr>(data_m, "BatchSampler")
      .def(py::init<data::sampler_ptr, int64_t, bool>(), py::arg("sampler"), py::arg("batch_size"),
           py::arg("drop_last"))
      .def("__len__", &data::batch_sampler::size)
      .def("__iter__", [](data::batch_sampler& b) { return py::iter(py::cast(b.batches())); });

  namespace tf = data::transforms;
  auto tf_m = m.def_submodule("transforms", "torchvision's per-sample transforms, in C++");
  py::class_<py_transform>(tf_m, "Transform")
      .def("__call__", [](const py_transform& t, const py::object& image) {
        return t.fn(tensor_from_dlpack(image));
      });
  auto crop_of = [](const std::vector<int64_t>& size, const char* who) {
    ACTORCH_CHECK(size.size() == 1 || size.size() == 2, who,
                  ": size is one number or (height, width), got ", size.size(), " numbers");
    return size.size() == 1 ? tf::crop_size(size[0]) : tf::crop_size(size[0], size[1]);
  };
  tf_m.def(
      "Compose",
      [](const std::vector<py_transform>& ts) {
        std::vector<tf::transform> fns;
        for (const auto& t : ts)
          fns.push_back(t.fn);
        return py_transform{tf::compose(std::move(fns))};
      },
      py::arg("transforms"));
  tf_m.def(
      "Normalize",
      [](std::vector<double> mean, std::vector<double> std) {
        return py_transform{tf::normalize(std::move(mean), std::move(std))};
      },
      py::arg("mean"), py::arg("std"));
  tf_m.def(
      "RandomCrop",
      [crop_of](const std::vector<int64_t>& size, std::vector<int64_t> padding, bool pad_if_needed,
                double fill) {
        return py_transform{tf::random_crop(
            crop_of(size, "RandomCrop"),
            {.padding = std::move(padding), .pad_if_needed = pad_if_needed, .fill = fill})};
      },
      py::arg("size"), py::arg("padding") = std::vector<int64_t>{},
      py::arg("pad_if_needed") = false, py::arg("fill") = 0.0);
  tf_m.def(
      "CenterCrop",
      [crop_of](const std::vector<int64_t>& size) {
        return py_transform{tf::center_crop(crop_of(size, "CenterCrop"))};
      },
      py::arg("size"));
  tf_m.def(
      "Resize",
      [](const py::object& size, std::optional<int64_t> max_size, bool antialias) {
        const std::vector<int64_t> s = py::isinstance<py::int_>(size)
                                           ? std::vector<int64_t>{size.cast<int64_t>()}
                                           : size.cast<std::vector<int64_t>>();
        return py_transform{tf::resize(s, {.max_size = max_size, .antialias = antialias})};
      },
      py::arg("size"), py::arg("max_size") = py::none(), py::arg("antialias") = true);
  tf_m.def(
      "RandomHorizontalFlip", [](double p) { return py_transform{tf::random_horizontal_flip(p)}; },
      py::arg("p") = 0.5);
  tf_m.def(
      "Lambda",
      [](py::object fn) {
        // The slow path (Note [Python module]): Python code under the GIL, on a worker's thread.
        auto held = std::make_shared<gil_object>(std::move(fn));
        return py_transform{tf::lambda_([held](const tensor& t) {
          py::gil_scoped_acquire gil;
          return tensor_from_dlpack(held->obj(py::cast(t)));
        })};
      },
      py::arg("fn"));

  py::class_<loader_iterator>(m, "_LoaderIterator")
      .def("__iter__", [](loader_iterator& it) -> loader_iterator& { return it; })
      .def("__next__", &loader_iterator::next);
  py::class_<data::data_loader, std::shared_ptr<data::data_loader>>(m, "DataLoader")
      .def(py::init([](py::object dataset, std::optional<int64_t> batch_size, bool shuffle,
                       data::sampler_ptr sampler, data::batch_sampler_ptr batch_sampler,
                       int64_t num_workers, py::object collate_fn, bool pin_memory, bool drop_last,
                       double timeout, py::object worker_init_fn,
                       std::string multiprocessing_context, std::optional<uint64_t> seed,
                       std::optional<int64_t> prefetch_factor, bool persistent_workers,
                       bool in_order) {
             data::loader_options o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.sampler = std::move(sampler);
             o.batch_sampler = std::move(batch_sampler);
             o.num_workers = num_workers;
             o.pin_memory = pin_memory;
             o.drop_last = drop_last;
             o.timeout = timeout;
             o.multiprocessing_context = std::move(multiprocessing_context);
             o.prefetch_factor = prefetch_factor;
             o.persistent_workers = persistent_workers;
             o.in_order = in_order;
             o.generator = generator_of(seed);
             // The slow path (Note [Python module]): Python code under the GIL.
             if (!collate_fn.is_none())
               o.collate_fn = [fn = std::make_shared<gil_object>(collate_fn)](
                                  std::vector<data::sample> samples) {
                 py::gil_scoped_acquire gil;
                 py::list items;
                 for (const auto& s : samples)
                   items.append(to_python(s, false));
                 return from_python(fn->obj(items));
               };
             if (!worker_init_fn.is_none())
               o.worker_init_fn = [fn = std::make_shared<gil_object>(worker_init_fn)](int64_t id) {
                 py::gil_scoped_acquire gil;
                 fn->obj(id);
               };
             if (py::isinstance<sqlite_source>(dataset)) { // a source actor instead of workers
               // The loader goes first, then the source's system (members die in reverse).
               struct with_source {
                 std::shared_ptr<sqlite_source> src;
                 std::shared_ptr<data::data_loader> loader;
               };
               auto src = dataset.cast<std::shared_ptr<sqlite_source>>();
               auto both = std::make_shared<with_source>(
                   with_source{src, python_owned(data::make_source_loader(
                                        src->sys, src->actor, src->size, std::move(o)))});
               return std::shared_ptr<data::data_loader>(both, both->loader.get());
             }
             return python_owned(
                 data::data_loader(dataset.cast<std::shared_ptr<data::dataset>>(), std::move(o)));
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false,
           py::arg("sampler") = nullptr, py::arg("batch_sampler") = nullptr,
           py::arg("num_workers") = 0, py::arg("collate_fn") = py::none(),
           py::arg("pin_memory") = false, py::arg("drop_last") = false, py::arg("timeout") = 0.0,
           py::arg("worker_init_fn") = py::none(), py::arg("multiprocessing_context") = "",
           py::arg("seed") = py::none(), py::arg("prefetch_factor") = py::none(),
           py::arg("persistent_workers") = false, py::arg("in_order") = true)
      .def("__len__", &data::data_loader::size)
      .def(
          "__iter__",
          [](std::shared_ptr<data::data_loader> self, std::optional<bool> as_torch) {
            return loader_iterator(std::move(self), as_torch.value_or(torch_available()));
          },
          py::arg("as_torch") = py::none());
}
