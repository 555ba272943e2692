// Samplers, as torch.utils.data's: each epoch, a sampler yields the dataset indices to load, in
// order. SequentialSampler, RandomSampler, SubsetRandomSampler and WeightedRandomSampler are
// here; BatchSampler (batch_sampler.hpp) groups their indices into batches and
// DistributedSampler (distributed_sampler.hpp) shards them across ranks. The loader draws a
// whole epoch's indices at the start of the epoch, from the consumer's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/random.hpp"

namespace actorch::data {

class sampler {
public:
  virtual ~sampler() = default;
  /// len(sampler): how many indices one epoch yields.
  virtual int64_t size() const = 0;
  /// The indices of the next epoch; a random sampler advances its generator.
  virtual std::vector<int64_t> indices() = 0;
  /// DistributedSampler.set_epoch, the user's: from the first call on, the loader leaves the
  /// epoch to the user, as torch's loader does (it never sets one).
  void set_epoch(int64_t epoch) {
    epoch_set_by_user_ = true;
    apply_epoch(epoch);
  }
  /// The loader's epoch count, applied before every epoch unless the user ever called
  /// set_epoch: a sampler the user never sets still reshuffles per epoch.
  void loader_epoch(int64_t epoch) {
    if (!epoch_set_by_user_)
      apply_epoch(epoch);
  }
  /// The generator this sampler draws from, or nullptr: the loader saves and restores its
  /// state to resume an epoch (see data_loader::state()).
  virtual generator* rng() { return nullptr; }

protected:
  /// What an epoch changes in this sampler (DistributedSampler's shuffle); nothing by default.
  virtual void apply_epoch(int64_t /*epoch*/) {}

private:
  bool epoch_set_by_user_ = false;
};

using sampler_ptr = std::shared_ptr<sampler>;

/// SequentialSampler: 0, 1, ..., n-1.
class sequential_sampler : public sampler {
public:
  explicit sequential_sampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() override;

private:
  int64_t n_;
};

/// The given indices in the given order, every epoch (torch takes any iterable of indices as
/// a sampler; this is that list's C++ form).
class list_sampler : public sampler {
public:
  explicit list_sampler(std::vector<int64_t> indices) : indices_(std::move(indices)) {}
  int64_t size() const override { return int64_t(indices_.size()); }
  std::vector<int64_t> indices() override { return indices_; }

private:
  std::vector<int64_t> indices_;
};

/// RandomSampler over n indices: a permutation per epoch, or num_samples draws with
/// replacement. Without a generator it makes its own, seeded from the default generator.
class random_sampler : public sampler {
public:
  /// num_samples < 0 means n (PyTorch's None). @pre n >= 0; num_samples != 0.
  explicit random_sampler(int64_t n, bool replacement = false, int64_t num_samples = -1,
                          std::shared_ptr<generator> gen = nullptr);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() override;
  generator* rng() override { return gen_.get(); }

private:
  int64_t n_;
  bool replacement_;
  int64_t num_samples_;
  std::shared_ptr<generator> gen_;
};

/// SubsetRandomSampler: the given indices in a random order each epoch.
class subset_random_sampler : public sampler {
public:
  explicit subset_random_sampler(std::vector<int64_t> indices,
                                 std::shared_ptr<generator> gen = nullptr);
  int64_t size() const override { return int64_t(indices_.size()); }
  std::vector<int64_t> indices() override;
  generator* rng() override { return gen_.get(); }

private:
  std::vector<int64_t> indices_;
  std::shared_ptr<generator> gen_;
};

/// WeightedRandomSampler: num_samples indices drawn with probability proportional to weights
/// (torch.multinomial), with or without replacement.
class weighted_random_sampler : public sampler {
public:
  /// @pre weights non-negative with a positive sum; num_samples > 0; without replacement,
  /// num_samples <= the number of non-zero weights.
  weighted_random_sampler(std::vector<double> weights, int64_t num_samples, bool replacement = true,
                          std::shared_ptr<generator> gen = nullptr);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() override;
  generator* rng() override { return gen_.get(); }

private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;
  int64_t num_samples_;
  bool replacement_;
  std::shared_ptr<generator> gen_;
};

/// A generator seeded from the default generator (what a sampler uses when given none).
std::shared_ptr<generator> seeded_from_default();
/// Uniform 64-bit and [0, 1) draws from a generator.
uint64_t random_u64(generator& gen);
double random_double(generator& gen);
/// randperm(n) drawn from gen, as a vector.
std::vector<int64_t> random_permutation(int64_t n, generator& gen);

} // namespace actorch::data
