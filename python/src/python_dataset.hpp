// A user's Python dataset, sampler and batch sampler as the C++ loader's own types, so that
// actorch.DataLoader takes what torch.utils.data.DataLoader takes: any object with __getitem__
// and __len__ (map-style), any with __iter__ (iterable), any iterable of indices as a sampler
// and of index lists as a batch sampler. Each call into Python takes the GIL. See Note [Python
// datasets] in python_dataset.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/batch_sampler.hpp"
#include "core/data/dataset.hpp"
#include "core/data/sampler.hpp"
#include "python/src/convert.hpp"

namespace actorch::python {

/// The keys a Python sampler yielded that are not indices 0..size-1 (Note [Sampler keys]), each
/// under an index from size up; shared by a Python dataset and its sampler's adapter.
class sampler_keys {
public:
  explicit sampler_keys(int64_t size);
  /// The index the loader carries for what a sampler yielded: an int in [0, size) itself,
  /// anything else (a str, a tuple, a negative or larger int) a new index from size up, which
  /// names it until the next clear(). @pre the GIL is held.
  int64_t index_of(const py::handle& key);
  /// Forgets the keys yielded so far (a new epoch's plan); their indices are not used again.
  /// @pre the GIL is held.
  void clear();
  /// What `index` stands for: its key, or the int itself (below size, or none held for it).
  /// @pre the GIL is held.
  py::object key(int64_t index) const;
  /// data::keyed_dataset's keys_of, learn_keys and index_name.
  std::string encode(const std::vector<int64_t>& indices) const;
  void learn(std::string_view encoded);
  std::string name(int64_t index) const;

private:
  /// The key held for `index` (borrowed), or null: below size, or none. @pre the GIL is held.
  PyObject* held(int64_t index) const;

  int64_t size_;
  int64_t next_;
  std::shared_ptr<gil_object> table_; // a dict: index -> key
};

/// dataset[key] and len(dataset) of a Python map-style dataset, the key being an index or what
/// the sampler yielded (sampler_keys).
class python_map_dataset : public data::keyed_dataset {
public:
  /// @pre the GIL is held; len(obj) is taken once, here. `opaque`: each sample is held as the
  /// Python object __getitem__ returned (python_value), for a Python collate_fn to take as is.
  python_map_dataset(py::object obj, bool opaque);
  int64_t size() const override { return size_; }
  data::sample get(int64_t index) const override;
  /// With __getitems__, as torch's loader: one call per batch (Note [Batched fetch] in
  /// actors/loader/worker.cpp).
  bool fetches_batches() const override { return getitems_; }
  std::vector<data::sample> get_many(const std::vector<int64_t>& indices) const override;
  std::string keys_of(const std::vector<int64_t>& indices) const override;
  void learn_keys(std::string_view encoded) const override;
  std::string index_name(int64_t index) const override;
  const py::object& object() const { return obj_->obj; }
  /// The table its sampler's adapter fills.
  const std::shared_ptr<sampler_keys>& keys() const { return keys_; }

private:
  std::shared_ptr<gil_object> obj_;
  int64_t size_;
  bool opaque_;
  bool getitems_;
  std::shared_ptr<sampler_keys> keys_;
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
/// never calls set_epoch on it, as torch's loader never does. With `keys` (a Python dataset's)
/// it may yield keys of any kind; without, only ints (an actorch C++ dataset's indices).
class python_sampler : public data::sampler {
public:
  python_sampler(py::object obj, std::shared_ptr<sampler_keys> keys);
  int64_t size() const override;
  std::vector<int64_t> indices() override;

private:
  std::shared_ptr<gil_object> obj_;
  std::shared_ptr<sampler_keys> keys_;
};

/// A Python iterable of index lists (a torch BatchSampler, a list of lists); `keys` as
/// python_sampler's.
class python_batch_sampler : public data::batch_sampler {
public:
  python_batch_sampler(py::object obj, std::shared_ptr<sampler_keys> keys);
  std::vector<std::vector<int64_t>> batches() override;
  int64_t size() const override;
  void loader_epoch(int64_t /*epoch*/) override {}
  generator* rng() override { return nullptr; }

private:
  std::shared_ptr<gil_object> obj_;
  std::shared_ptr<sampler_keys> keys_;
};

} // namespace actorch::python
