// DistributedSampler: each of num_replicas ranks gets its own 1/num_replicas of the indices.
// Without drop_last the index list is padded (wrapping around) so that every rank gets the same
// count; with drop_last the tail is dropped instead. Shuffling uses a generator seeded with
// seed + epoch, so every rank draws the same permutation: call set_epoch before each epoch, as
// with torch (the loader advances the epoch itself for a sampler whose set_epoch is never called).
#pragma once

#include <functional>
#include <optional>
#include <utility>

#include "core/data/sampler.hpp"

namespace actorch::data {

/// The default process group's (world size, rank), or nullopt when none is initialised. core
/// sits below comm, so comm's init_process_group installs this query; until then it answers
/// nullopt.
using default_group_query = std::function<std::optional<std::pair<int64_t, int64_t>>()>;
void set_default_group_query(default_group_query query);

class distributed_sampler : public sampler {
public:
  /// num_replicas and rank default to the default process group's world size and rank, as
  /// torch's None does (an error when the group is not initialised).
  /// @pre num_replicas > 0, 0 <= rank < num_replicas.
  explicit distributed_sampler(int64_t dataset_size,
                               std::optional<int64_t> num_replicas = std::nullopt,
                               std::optional<int64_t> rank = std::nullopt, bool shuffle = true,
                               uint64_t seed = 0, bool drop_last = false);
  /// Samples per rank (num_samples in PyTorch).
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() override;
  int64_t epoch() const { return epoch_; }
  /// The whole dataset's order in `epoch`, before padding and division: what every rank's
  /// indices() are taken from.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  int64_t total_size() const { return total_size_; }

protected:
  void apply_epoch(int64_t epoch) override { epoch_ = epoch; }

private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_, total_size_;
};

/// Note [Elastic data position]: the epoch order's positions from `offset` on, divided among
/// `num_replicas` as DistributedSampler divides a whole epoch (padded by wrapping around the
/// rest, or cut with drop_last), and rank `rank`'s share. With offset 0 it is indices().
/// @pre 0 <= offset, 0 <= rank < num_replicas.
std::vector<int64_t> remaining_shard(const std::vector<int64_t>& order, int64_t offset,
                                     int64_t num_replicas, int64_t rank, bool drop_last);

} // namespace actorch::data
