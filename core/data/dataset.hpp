// Datasets, as torch.utils.data's: map-style (size() and get(index)) and iterable-style (a
// stream of samples), and the built-in combinators TensorDataset, ConcatDataset, ChainDataset,
// Subset and random_split. Plain C++: the loader (actors/) calls get() from its worker actors,
// several at once, so a map-style dataset's get() must be safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/sample.hpp"
#include "core/random.hpp"

namespace actorch::data {

/// torch.utils.data.Dataset: indices 0..size()-1 map to samples.
class dataset {
public:
  virtual ~dataset() = default;
  virtual int64_t size() const = 0;
  /// The sample at `index`. @pre 0 <= index < size(). Called concurrently by loader workers.
  virtual sample get(int64_t index) const = 0;
  /// Whether a batch's samples come from one get_many() call instead of a get() each: torch's
  /// __getitems__, which its loader calls once per batch where a dataset defines it.
  virtual bool fetches_batches() const { return false; }
  /// The samples of a batch's `indices`, in one call (with fetches_batches()). They may be
  /// fewer or more than the indices (a dataset that drops a corrupt record): the batch is
  /// what it returns, as torch collates what __getitems__ returns. By default get() of each.
  virtual std::vector<sample> get_many(const std::vector<int64_t>& indices) const;
};

/// A map-style dataset whose sampler may yield keys of other kinds than 0..size()-1: torch hands
/// __getitem__ whatever its sampler yields (a file name, YOLOX's (mosaic, index) tuples, a
/// negative index). The sampler gives each such key an index of size() or more for the epoch,
/// which get() maps back (a Python dataset's; see Note [Sampler keys] in
/// python/src/python_dataset.cpp). The loader carries those indices as any others, and tells a
/// worker process's copy of the dataset the keys of each batch it loads.
class keyed_dataset : public dataset {
public:
  /// The keys of those of `indices` that are keys (index >= size()), encoded for learn_keys in
  /// another process; empty when there are none.
  virtual std::string keys_of(const std::vector<int64_t>& indices) const = 0;
  /// Takes keys_of's encoding: get() then maps those indices to those keys.
  virtual void learn_keys(std::string_view encoded) const = 0;
  /// How messages name the sample at `index`: "index 7", or the key it stands for ("key
  /// 'cat.jpg'").
  virtual std::string index_name(int64_t index) const = 0;
};

/// One pass over an iterable dataset; next() returns std::nullopt at the end.
class sample_iterator {
public:
  virtual ~sample_iterator() = default;
  virtual std::optional<sample> next() = 0;
};

/// torch.utils.data.IterableDataset: each iter() starts a new pass over a stream of samples.
class iterable_dataset {
public:
  virtual ~iterable_dataset() = default;
  virtual std::unique_ptr<sample_iterator> iter() const = 0;
};

using dataset_ptr = std::shared_ptr<const dataset>;
using iterable_dataset_ptr = std::shared_ptr<const iterable_dataset>;

/// TensorDataset: sample i is the tuple (t[i] for t in tensors), views into the tensors.
class tensor_dataset : public dataset {
public:
  /// @pre at least one tensor, all with the same size(0).
  explicit tensor_dataset(std::vector<tensor> tensors);
  int64_t size() const override;
  sample get(int64_t index) const override;
  const std::vector<tensor>& tensors() const { return tensors_; }

private:
  std::vector<tensor> tensors_;
};

/// ConcatDataset: the datasets one after another; negative indices count from the end.
class concat_dataset : public dataset {
public:
  explicit concat_dataset(std::vector<dataset_ptr> datasets);
  int64_t size() const override;
  sample get(int64_t index) const override;
  const std::vector<int64_t>& cumulative_sizes() const { return cumulative_; }

private:
  std::vector<dataset_ptr> datasets_;
  std::vector<int64_t> cumulative_;
};

/// ChainDataset: the iterable datasets' streams one after another.
class chain_dataset : public iterable_dataset {
public:
  explicit chain_dataset(std::vector<iterable_dataset_ptr> datasets);
  std::unique_ptr<sample_iterator> iter() const override;

private:
  std::vector<iterable_dataset_ptr> datasets_;
};

/// Subset: sample i is dataset[indices[i]].
class subset : public dataset {
public:
  subset(dataset_ptr dataset, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  sample get(int64_t index) const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  const dataset_ptr& dataset() const { return dataset_; }

private:
  dataset_ptr dataset_;
  std::vector<int64_t> indices_;
};

/// random_split with lengths summing to dataset->size(): a random permutation (drawn from
/// `gen`) cut into consecutive pieces.
std::vector<std::shared_ptr<subset>>
random_split(const dataset_ptr& dataset, const std::vector<int64_t>& lengths, generator& gen);
/// random_split with fractions summing to 1: floor(f * size) each, the remainder handed out one
/// by one round-robin from the first piece, as PyTorch does.
std::vector<std::shared_ptr<subset>>
random_split(const dataset_ptr& dataset, const std::vector<double>& fractions, generator& gen);

/// Checks 0 <= index < size and throws actorch::error naming `who` otherwise.
void check_index(int64_t index, int64_t size, const char* who);

} // namespace actorch::data
