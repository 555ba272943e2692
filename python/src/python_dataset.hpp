// A user's Python dataset, sampler and batch sampler as the C++ loader's own types, so that
// actorch.DataLoader takes what torch.utils.data.DataLoader takes: any object with __getitem__
// and __len__ (map-style), any with __iter__ (iterable), any iterable of indices as a sampler
// and of index lists as a batch sampler. Each call into Python takes the GIL. See Note [Python
// datasets] in python_dataset.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "core/data/batch_sampler.hpp"
#include "core/data/dataset.hpp"
#include "core/data/sampler.hpp"
#include "python/src/convert.hpp"

namespace actorch::python {

/// dataset[i] and len(dataset) of a Python map-style dataset.
class python_map_dataset : public data::dataset {
public:
  /// @pre the GIL is held; len(obj) is taken once, here. `opaque`: each sample is held as the
  /// Python object __getitem__ returned (python_value), for a Python collate_fn to take as is.
  python_map_dataset(py::object obj, bool opaque);
  int64_t size() const override { return size_; }
  data::sample get(int64_t index) const override;
  const py::object& object() const { return obj_->obj; }

private:
  std::shared_ptr<gil_object> obj_;
  int64_t size_;
  bool opaque_;
};

/// iter(dataset), then next() until StopIteration, of a Python iterable dataset.
class python_iterable_dataset : public data::iterable_dataset {
public:
  /// `opaque` as python_map_dataset's.
  python_iterable_dataset(py::object obj, bool opaque);
  std::unique_ptr<data::sample_iterator> iter() const override;
  const py::object& object() const { return obj_->obj; }

private:
  std::shared_ptr<gil_object> obj_;
  bool opaque_;
};

/// A Python iterable of indices (a list, a torch sampler): its indices each epoch. The loader
/// never calls set_epoch on it, as torch's loader never does.
class python_sampler : public data::sampler {
public:
  explicit python_sampler(py::object obj);
  int64_t size() const override;
  std::vector<int64_t> indices() override;

private:
  std::shared_ptr<gil_object> obj_;
};

/// A Python iterable of index lists (a torch BatchSampler, a list of lists).
class python_batch_sampler : public data::batch_sampler {
public:
  explicit python_batch_sampler(py::object obj);
  std::vector<std::vector<int64_t>> batches() override;
  int64_t size() const override;
  void loader_epoch(int64_t /*epoch*/) override {}
  generator* rng() override { return nullptr; }

private:
  std::shared_ptr<gil_object> obj_;
};

} // namespace actorch::python
