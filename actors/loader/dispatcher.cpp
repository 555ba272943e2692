// The dispatcher (dispatcher.hpp).
//
// Note [Loader credits]
// ~~~~~~~~~~~~~~~~~~~~~
// CAF 0.17's stream stages do not keep back-pressure across a stage, so flow control is
// explicit. A run starts with `credits` = prefetch_factor x num_workers. The coordinator sends
// one index batch per credit; the credit comes back when the consumer takes the batch: the
// range-for as it dequeues it, a consumer actor by replying credit_atom once done with it (an
// actor's mailbox is its queue, so release is the only moment it can name). So at most
// `credits` batches are in flight between the coordinator and the consumer, whatever the
// speeds (loading, waiting in the reorder buffer, queued), plus the one the range-for holds:
// PyTorch's count, where a task is outstanding until the main process receives its batch.
// Counting the held batch as well would leave a worker with nothing queued behind its current
// batch once per batch, idle for the credit's round trip (docs/performance.md, "Loader
// credits"). Batch memory is bounded by construction, and with buffers recycled through the
// pool a steady-state epoch allocates nothing.
//
// Note [Iterable runs]
// ~~~~~~~~~~~~~~~~~~~~
// With an iterable dataset there is no index plan. Each worker iterates
// its own iter() (split by the user through get_worker_info(), or the whole stream each). Batch
// k of worker w's stream, of n workers, has the index (seq) k * n + w: its place in the
// round-robin as long as no stream has ended. The dispatcher hands out, one task per credit, the
// batch of least index among the workers not known exhausted. A worker replies with a batch,
// or with end_of_data once its stream is done: that task yields nothing, its credit comes
// straight back, and in_order passes over every later index of that worker. So the delivered
// order is the workers' batches interleaved round-robin, an exhausted worker dropping out of
// the rotation (PyTorch's order for iterables), and a batch's index, hence its generator
// (Note [Batch randomness]), is the same whatever the timing. Numbering tasks in the order
// they were sent would not do: whether a task goes to a worker whose end is not yet known or
// to the next one depends on when that end arrives, and with it every later batch's seed.
// The epoch ends when every worker is exhausted and nothing is outstanding or waiting.
//
#include "actors/loader/dispatcher.hpp"

#include <algorithm>

#include "actors/loader/plan.hpp"

namespace actorch::actors {

void dispatcher::start(const epoch_plan& plan, size_t sources, bool round_robin) {
  credit_ = plan.credits;
  round_robin_ = round_robin;
  next_emit_ = 0;
  outstanding_.clear();
  queued_.assign(sources, {});
  resumed_k_ = plan.resumed;
  resumed_k_.resize(sources, 0);
  next_k_ = resumed_k_;
  end_k_.assign(sources, kNoEnd);
  seq_frontier_ = 0;
}

std::optional<dispatcher::pick> dispatcher::next(const epoch_plan& plan) {
  if (credit_ <= 0)
    return std::nullopt;
  if (plan.iterable) {
    // See Note [Iterable runs]: the least index among the sources not known exhausted (the
    // least batch of its stream, ties to the lowest id).
    const size_t n = queued_.size();
    size_t w = n;
    for (size_t i = 0; i < n; ++i)
      if (!ended(i) && (w == n || next_k_[i] < next_k_[w]))
        w = i;
    if (w == n)
      return std::nullopt;
    const int64_t k = next_k_[w]++;
    pick p{k * int64_t(n) + int64_t(w), int64_t(w), {}};
    if (k == resumed_k_[w]) // See Note [Iterable resume]
      p.skip_seeds = resume_skip_seeds(plan.base_seed, plan.epoch, k, int64_t(n), int64_t(w));
    seq_frontier_ = std::max(seq_frontier_, p.seq + 1);
    --credit_;
    return p;
  }
  if (next_emit_ >= plan.batches.size())
    return std::nullopt;
  // The least busy source, ties to the lowest id; or, round robin, the next in turn.
  size_t w = round_robin_ ? next_emit_ % queued_.size() : 0;
  for (size_t i = 1; !round_robin_ && i < queued_.size(); ++i)
    if (queued_[i].size() < queued_[w].size())
      w = i;
  const int64_t seq = plan.batches[next_emit_++].first;
  --credit_;
  return pick{seq, int64_t(w), {}};
}

bool dispatcher::sent(int64_t seq, int64_t w, int attempt, int64_t covers) {
  outstanding_[seq] = {w, attempt, covers};
  auto& queue = queued_[size_t(w)];
  queue.push_back(seq);
  return queue.size() == 1;
}

int64_t dispatcher::retire(int64_t w, int64_t seq) {
  auto& queue = queued_[size_t(w)];
  const auto it = std::find(queue.begin(), queue.end(), seq);
  if (it == queue.end())
    return -1;
  const bool head = it == queue.begin();
  queue.erase(it);
  return head && !queue.empty() ? queue.front() : -1;
}

std::optional<int64_t> dispatcher::take(const task_board::taken& t) {
  auto it = outstanding_.find(t.seq);
  if (it == outstanding_.end() || it->second.attempt != t.attempt || it->second.worker == t.by)
    return std::nullopt; // back already, or re-issued after a death since it was taken
  const int64_t old_owner_begins = retire(it->second.worker, t.seq);
  it->second.worker = t.by;
  auto& queue = queued_[size_t(t.by)];
  if (!queue.empty())
    outstanding_.at(queue.front()).clock = 0;
  queue.push_front(t.seq);
  return old_owner_begins;
}

outstanding_task* dispatcher::find(int64_t seq) {
  auto it = outstanding_.find(seq);
  return it == outstanding_.end() ? nullptr : &it->second;
}

std::deque<int64_t> dispatcher::drop_queue(int64_t w) {
  return std::exchange(queued_[size_t(w)], {});
}

void dispatcher::end_stream(int64_t w, int64_t seq) {
  end_k_[size_t(w)] = std::min(end_k_[size_t(w)], seq / int64_t(queued_.size()));
}

bool dispatcher::passed_over(size_t pos) const {
  if (int64_t(pos) >= seq_frontier_)
    return false;
  const size_t n = queued_.size(), w = pos % n;
  const int64_t k = int64_t(pos / n);
  return k < resumed_k_[w] || k >= end_k_[w];
}

bool dispatcher::streams_done() const {
  for (size_t w = 0; w < queued_.size(); ++w)
    if (!ended(w))
      return false;
  return outstanding_.empty();
}

} // namespace actorch::actors
