// The epoch's first batches, loaded by every worker at once (Note [First batches shared]): a
// registry of the batches whose samples any worker may load, each sample at most once, the
// batch's owner collating them in order when all are in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "core/data/dataset.hpp"

namespace actorch::actors {

/// ds.get(indices[position]) under the sample's own generator (Note [Batch randomness]). A
/// std::exception's message goes into `error`, naming `who`, the index and batch `seq`; any
/// other exception goes on up (the worker dies: Note [Worker crash]).
data::sample load_sample(const data::dataset& ds, const std::vector<int64_t>& indices,
                         int64_t position, uint64_t batch_seed, int64_t seq, const std::string& who,
                         std::string& error);

class batch_sharing {
public:
  /// One batch open to every worker: its samples, claimed one by one.
  struct open_batch {
    uint64_t run_id = 0;
    int64_t seq = 0;
    uint64_t seed = 0;
    std::vector<int64_t> indices;
    std::atomic<int64_t> next{0}; // the next sample position nobody has claimed
    std::mutex mutex;
    std::condition_variable changed;
    enum class slot : uint8_t { pending, in, lost };
    /// Under mutex: each position's state, its sample and its error (non-empty: get()
    /// failed). A lost position's loader died in get() (an exception not derived from
    /// std::exception, Note [Worker crash]): the owner loads it again itself.
    std::vector<slot> state;
    std::vector<data::sample> samples;
    std::vector<std::string> errors;
  };

  /// Batches with seq < shared_batches are shared (the epoch's first round: one per worker).
  explicit batch_sharing(int64_t shared_batches) : shared_batches_(shared_batches) {}

  bool shares(const index_batch& task) const {
    return task.auto_collation && task.seq < shared_batches_ && task.indices.size() > 1;
  }
  /// Opens `task` to the other workers; the caller owns it and closes it (closing_guard).
  std::shared_ptr<open_batch> open(const index_batch& task);
  void close(const open_batch& b);
  struct closing_guard {
    batch_sharing& sharing;
    const open_batch& batch;
    ~closing_guard() { sharing.close(batch); }
  };
  /// The earliest open batch of run `run_id` before `seq` with an unclaimed sample, or null.
  std::shared_ptr<open_batch> earliest_before(uint64_t run_id, int64_t seq);

  /// Claims and loads the next sample of `b` on this thread (its own generator, Note [Batch
  /// randomness]); false when every sample was claimed already. A failure is kept in b.errors,
  /// named after `who`; an exception not derived from std::exception marks the sample lost and
  /// goes on up (the worker dies, as it would loading its own batch).
  static bool load_next(open_batch& b, const data::dataset& ds, const std::string& who);
  /// The state of `position`, waiting first until it is no longer pending when `wait`; its
  /// sample and error are moved into `s` and `error` once it is in.
  static open_batch::slot take(open_batch& b, int64_t position, bool wait, data::sample& s,
                               std::string& error);

private:
  int64_t shared_batches_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<open_batch>> open_;
  // open_.size(), read without the lock: earliest_before runs once per sample of every later
  // batch too, and after the first batches there is nothing to help with. A batch opened just
  // after a look is found at the next sample's.
  std::atomic<size_t> open_count_{0};
};

} // namespace actorch::actors
