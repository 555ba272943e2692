// Note [First batches shared]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A consumer waits for the epoch's first batch from start, and one
// worker loading all of its samples makes that wait a whole batch's loading time, however many
// workers there are (64 JPEGs at ~1 ms each is 64 ms with 2 workers as with 1; torchvision's
// loader has the same wait). Later batches are prefetched, so only the first round's latency
// shows. So the first num_workers batches of a run are shared: their owner opens the batch
// here, and every worker, before each sample it loads, first loads an unclaimed sample of an
// open batch earlier than its own (the consumer needs that one first). Each sample is claimed
// once (an atomic counter) and loaded under its own generator (Note [Batch randomness]), so
// who loads it changes nothing in it. The owner collates the samples in order as they come in
// (between its own loads, so that the copies overlap the helpers' loading); a batch's helper holds
// its own reference, so the owner may return (cancelled) while a helper still loads. A helper that
// dies in get() (Note [Worker crash]) leaves its sample to the owner, which loads it again itself.
// Later batches take the streaming path, unshared: sharing costs a claim and holding the batch's
// samples until collate, which the fast small-sample loads would feel.
#include "actors/loader/batch_sharing.hpp"

#include <algorithm>

#include "actors/loader/slow_samples.hpp"
#include "core/data/worker_info.hpp"

namespace actorch::actors {

data::sample load_sample(const data::dataset& ds, const std::vector<int64_t>& indices,
                         int64_t position, uint64_t batch_seed, int64_t seq, const std::string& who,
                         std::string& error) {
  const int64_t index = indices[size_t(position)];
  data::batch_scope randomness(data::sample_seed(batch_seed, position));
  slow_samples::sample_scope watched(index, seq); // named if it sits here past report_delay
  try {
    return ds.get(index);
  } catch (const std::exception& e) {
    const auto* keyed = dynamic_cast<const data::keyed_dataset*>(&ds);
    error = who + " failed on sample " +
            (keyed ? keyed->index_name(index) : "index " + std::to_string(index)) + " (batch " +
            std::to_string(seq) + "): " + e.what();
    return {};
  }
}

std::shared_ptr<batch_sharing::open_batch> batch_sharing::open(const index_batch& task) {
  auto b = std::make_shared<open_batch>();
  b->run_id = task.run_id;
  b->seq = task.seq;
  b->seed = task.seed;
  b->indices = task.indices;
  b->state.assign(task.indices.size(), open_batch::slot::pending);
  b->samples.resize(task.indices.size());
  b->errors.resize(task.indices.size());
  std::lock_guard lock(mutex_);
  open_.push_back(b);
  open_count_.store(open_.size(), std::memory_order_relaxed);
  return b;
}

void batch_sharing::close(const open_batch& b) {
  std::lock_guard lock(mutex_);
  std::erase_if(open_, [&](const auto& p) { return p.get() == &b; });
  open_count_.store(open_.size(), std::memory_order_relaxed);
}

std::shared_ptr<batch_sharing::open_batch> batch_sharing::earliest_before(uint64_t run_id,
                                                                          int64_t seq) {
  if (open_count_.load(std::memory_order_relaxed) == 0)
    return nullptr;
  std::lock_guard lock(mutex_);
  std::shared_ptr<open_batch> best;
  for (const auto& b : open_)
    if (b->run_id == run_id && b->seq < seq && (!best || b->seq < best->seq) &&
        b->next.load(std::memory_order_relaxed) < int64_t(b->indices.size()))
      best = b;
  return best;
}

bool batch_sharing::load_next(open_batch& b, const data::dataset& ds, const std::string& who) {
  const int64_t i = b.next.fetch_add(1);
  if (i >= int64_t(b.indices.size()))
    return false;
  data::sample s;
  std::string error;
  try {
    s = load_sample(ds, b.indices, i, b.seed, b.seq, who, error);
  } catch (...) {
    {
      std::lock_guard lock(b.mutex);
      b.state[size_t(i)] = open_batch::slot::lost;
    }
    b.changed.notify_all();
    throw;
  }
  {
    std::lock_guard lock(b.mutex);
    b.samples[size_t(i)] = std::move(s);
    b.errors[size_t(i)] = std::move(error);
    b.state[size_t(i)] = open_batch::slot::in;
  }
  b.changed.notify_all();
  return true;
}

batch_sharing::open_batch::slot batch_sharing::take(open_batch& b, int64_t position, bool wait,
                                                    data::sample& s, std::string& error) {
  std::unique_lock lock(b.mutex);
  const size_t p = size_t(position);
  if (wait)
    b.changed.wait(lock, [&] { return b.state[p] != open_batch::slot::pending; });
  if (b.state[p] == open_batch::slot::in) {
    s = std::move(b.samples[p]);
    error = std::move(b.errors[p]);
  }
  return b.state[p];
}

} // namespace actorch::actors
