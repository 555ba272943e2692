// actorch.data's C++ parts: the built-in datasets (NpyDataset, DigitsDataset, TensorDataset
// over arrays without a copy, TransformedDataset), the samplers as PyTorch names them, and the
// worker info a dataset asks for inside a loader worker.
#include <pybind11/stl.h>

#include "core/data/batch_sampler.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/data/npy_dataset.hpp"
#include "core/data/sampler.hpp"
#include "core/data/transforms.hpp"
#include "core/data/worker_info.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"
#include "python/src/python_dataset.hpp"
#include "python/src/transform.hpp"

namespace actorch::python {

namespace {

std::shared_ptr<generator> generator_of(std::optional<uint64_t> seed) {
  return seed ? std::make_shared<generator>(*seed) : nullptr;
}

/// The dataset a worker loads, as Python knows it: the user's own object for a Python dataset.
py::object worker_dataset(const data::worker_info& info) {
  if (auto* p = dynamic_cast<const python_map_dataset*>(info.dataset.get()))
    return p->object();
  if (auto* p = dynamic_cast<const python_iterable_dataset*>(info.iterable_dataset.get()))
    return p->object();
  if (info.dataset)
    return py::cast(std::const_pointer_cast<data::dataset>(info.dataset));
  return py::none();
}

} // namespace

void bind_data(py::module_& data_m) {
  data_m.def(
      "_worker_info",
      []() -> py::object {
        const data::worker_info* info = data::get_worker_info();
        if (info == nullptr)
          return py::none();
        return py::make_tuple(info->id, info->num_workers, info->seed, worker_dataset(*info));
      },
      "(id, num_workers, seed, dataset) of the loader worker on this thread, or None");

  py::class_<data::dataset, std::shared_ptr<data::dataset>>(data_m, "Dataset")
      .def("__len__", &data::dataset::size)
      .def("__getitem__",
           [](const data::dataset& d, int64_t i) { return to_python(d.get(i), {}); });
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

  py::class_<data::sampler, data::sampler_ptr>(data_m, "Sampler")
      .def("__len__", &data::sampler::size)
      .def("__iter__", [](data::sampler& s) { return py::iter(py::cast(s.indices())); })
      .def("set_epoch", &data::sampler::set_epoch);
  py::class_<data::sequential_sampler, data::sampler, std::shared_ptr<data::sequential_sampler>>(
      data_m, "SequentialSampler")
      .def(py::init([](const py::object& d) {
        return std::make_shared<data::sequential_sampler>(int64_t(py::len(d)));
      }));
  py::class_<data::random_sampler, data::sampler, std::shared_ptr<data::random_sampler>>(
      data_m, "RandomSampler")
      .def(py::init([](const py::object& d, bool replacement, std::optional<int64_t> n,
                       std::optional<uint64_t> seed) {
             return std::make_shared<data::random_sampler>(int64_t(py::len(d)), replacement,
                                                           n.value_or(-1), generator_of(seed));
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
      .def(py::init([](const py::object& d, std::optional<int64_t> num_replicas,
                       std::optional<int64_t> rank, bool shuffle, uint64_t seed, bool drop_last) {
             return std::make_shared<data::distributed_sampler>(int64_t(py::len(d)), num_replicas,
                                                                rank, shuffle, seed, drop_last);
           }),
           py::arg("dataset"), py::arg("num_replicas") = py::none(), py::arg("rank") = py::none(),
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("drop_last") = false);
  py::class_<data::batch_sampler, data::batch_sampler_ptr>(data_m, "BatchSampler")
      .def(py::init<data::sampler_ptr, int64_t, bool>(), py::arg("sampler"), py::arg("batch_size"),
           py::arg("drop_last"))
      .def("__len__", &data::batch_sampler::size)
      .def("__iter__", [](data::batch_sampler& b) { return py::iter(py::cast(b.batches())); });
}

} // namespace actorch::python
