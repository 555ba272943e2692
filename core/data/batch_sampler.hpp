// BatchSampler: a sampler's indices grouped into batches of batch_size (the last one shorter
// unless drop_last). It is what the loader's sampler actor walks through, one index batch per
// credit. Subclass it (override batches() and size()) to hand the loader custom batches.
#pragma once

#include <vector>

#include "core/data/sampler.hpp"

namespace actorch::data {

class batch_sampler {
public:
  /// @pre base != nullptr, batch_size > 0.
  batch_sampler(sampler_ptr base, int64_t batch_size, bool drop_last);
  virtual ~batch_sampler() = default;

  /// The batches of the next epoch.
  virtual std::vector<std::vector<int64_t>> batches();
  /// len(batch_sampler): batches per epoch.
  virtual int64_t size() const;
  /// The loader's epoch count, forwarded to the sampler's loader_epoch (DistributedSampler
  /// reshuffles per epoch unless the user sets its epoch).
  virtual void loader_epoch(int64_t epoch);
  /// The generator of the sampler, if any (save/resume).
  virtual generator* rng();

  int64_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  const sampler_ptr& base() const { return sampler_; }

protected:
  batch_sampler() = default;

private:
  sampler_ptr sampler_;
  int64_t batch_size_ = 1;
  bool drop_last_ = false;
};

using batch_sampler_ptr = std::shared_ptr<batch_sampler>;

} // namespace actorch::data
