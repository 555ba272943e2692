// The batch shelf: what a sampler shares with the loader's own dataset workers. Where the
// range-for's workers leave a batch its consumer is not waiting for yet (in_order, an earlier
// batch still loading), so that it wakes nobody; the consumer's thread collects the shelf before
// it blocks (Note [Batch shelf] in sampler_actor.cpp). And the board of the tasks sent to them,
// from which a worker with nothing left takes a task still queued at another (Note [Task
// stealing]).
#pragma once

#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/messages.hpp"

namespace actorch::actors {

class batch_shelf {
public:
  /// A batch a worker left on the shelf instead of replying with it.
  struct item {
    loaded_batch batch;
    caf::strong_actor_ptr from; // the worker that loaded it, as the reply's sender would be
  };

  /// Worker side: keeps `b` (moving from it) and returns true if it belongs to the shelf's run
  /// and is not the batch the consumer waits for; never keeps an error or an end_of_data.
  /// false: reply with `b` as usual.
  bool offer(loaded_batch& b, const caf::strong_actor_ptr& from);

  /// A task a worker took from another's queue: from now on `by` holds batch `seq`.
  struct taken {
    int64_t seq;
    int64_t by;
    int attempt; // of the posting it took
  };

  /// Consumer side: from now on the consumer waits for batch `seq` of run `run_id`
  /// (run_id 0: no run, the shelf keeps nothing). Returns what the shelf held, of any run.
  /// @post the shelf is empty
  std::vector<item> wait_for(uint64_t run_id, int64_t seq);

  /// Sampler side: the tasks taken since the last call, into `takes`.
  void takes_since(std::vector<taken>& takes);

  /// Sampler side: `task` (attempt `attempt`) goes to worker `owner`; a posting of a new run
  /// drops those of the last, a re-issued batch's replaces its last. Post before sending.
  void post(const index_batch& task, int64_t owner, int attempt);
  /// Sampler side: worker `owner` died; no other worker may take its tasks from now on (the
  /// sampler re-issues them once it has collected the takes made before), and its heir keeps
  /// its first task.
  void freeze(int64_t owner);
  /// Sampler side: drops every posting (the run ended).
  void drop_posts();
  /// Worker `me` side, on a task it received, after its worker_init_fn: false if it is no
  /// longer its to load (another worker took it, or it was re-issued elsewhere): skip it. True
  /// otherwise, also for a task never posted.
  bool claim(const index_batch& task, int64_t me);
  /// Worker `me` side, done with a batch of run `run_id`: the earliest task no worker has
  /// begun, now `me`'s, unless a task of its own is on its way or there is none. A worker that
  /// has not yet begun (run its worker_init_fn) keeps its first task.
  std::optional<index_batch> next_for(uint64_t run_id, int64_t me);

private:
  static constexpr int64_t kFrozen = -2; // a dead owner's, left for the sampler to re-issue
  /// Drops every posting and take; the board is now run `run_id`'s. @pre mutex_ held
  void clear_posts(uint64_t run_id);
  struct posting {
    int64_t owner;
    int64_t holder; // the worker loading it once claimed or taken; -1: none yet
    int attempt;
  };

  std::mutex mutex_;
  uint64_t run_id_ = 0;
  int64_t wanted_ = -1;
  std::vector<item> items_;
  uint64_t posts_run_id_ = 0;
  std::unordered_map<int64_t, posting> posts_; // by seq: every task of the run
  std::vector<index_batch> open_;              // those no worker has begun, in sending order
  std::vector<bool> started_; // per worker: it has handled a task (so run its worker_init_fn)
  std::vector<taken> taken_;
};

} // namespace actorch::actors
