// The dispatcher: who loads what. It holds the run's credits (Note [Loader credits]), the
// tasks out at each source in the order sent (a source works on the first of its queue), the
// choice of the source for the next task, and an iterable run's rotation across the workers'
// streams (Note [Iterable runs]). It sends nothing itself: the coordinator sends what it picks.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/loader/task_board.hpp"
#include "actors/messages.hpp"

namespace actorch::actors {

/// A task out at a source.
struct outstanding_task {
  int64_t worker;
  int attempt;
  int64_t covers;    // the batches its load takes: 1, more for a catch-up (Note [Iterable resume])
  int64_t clock = 0; // its running deadline's number, 0: none (Note [Loader timeout])
};

class dispatcher {
public:
  /// The next task to send: batch `seq` to source `worker`, passing over `skip_seeds` first.
  struct pick {
    int64_t seq;
    int64_t worker;
    std::vector<uint64_t> skip_seeds;
  };

  /// A new run over `sources` sources: plan.credits credits, no task out. `round_robin`: a
  /// map-style run's k-th task goes to source k % sources, not to the least busy.
  void start(const epoch_plan& plan, size_t sources, bool round_robin = false);
  /// The next task while credit lasts, its credit taken; nullopt when there is none to send.
  std::optional<pick> next(const epoch_plan& plan);
  /// A batch was taken by the consumer, or an iterable task yielded nothing: one more credit.
  void return_credit() { ++credit_; }

  /// Batch `seq` went to source `w`: true if `w` begins it now (nothing else was out there).
  bool sent(int64_t seq, int64_t w, int attempt, int64_t covers);
  /// Batch `seq` came back from (or was dropped at) source `w`: the batch `w` begins now, or -1.
  int64_t retire(int64_t w, int64_t seq);
  /// Moves a taken task to its taker's queue, at its head (Note [Task stealing]); the head it
  /// displaces there loses its clock. nullopt if it did not change hands (back already, or
  /// re-issued since); else the taker begins it now, and the value is the batch its old owner
  /// begins now, or -1.
  std::optional<int64_t> take(const task_board::taken& t);

  outstanding_task* find(int64_t seq);
  void erase(int64_t seq) { outstanding_.erase(seq); }
  /// Source `w` died: its tasks, in the order they were sent; its queue is empty after.
  std::deque<int64_t> drop_queue(int64_t w);

  /// Iterable: source `w` has no batch at `seq` or after (its stream ended).
  void end_stream(int64_t w, int64_t seq);
  /// Iterable: whether in_order has nothing to wait for at position `pos` (a batch delivered
  /// before a resume, or past the end of its worker's stream).
  bool passed_over(size_t pos) const;
  /// Iterable: every stream ended and no task is out.
  bool streams_done() const;

private:
  static constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();
  bool ended(size_t w) const { return end_k_[w] != kNoEnd; }

  int64_t credit_ = 0;
  bool round_robin_ = false;
  size_t next_emit_ = 0;                                      // map-style: position in plan.batches
  std::unordered_map<int64_t, outstanding_task> outstanding_; // by seq
  // Per source, its outstanding tasks (seqs) in the order sent: it works on the first
  // (Note [Loader timeout]).
  std::vector<std::deque<int64_t>> queued_;
  // Iterable (Note [Iterable runs]), per source: the stream batch index of its next task, the
  // one its stream ended at (kNoEnd: not seen yet), and those delivered before a resume.
  std::vector<int64_t> next_k_, end_k_, resumed_k_;
  int64_t seq_frontier_ = 0; // iterable: one past the highest seq handed out
};

} // namespace actorch::actors
