// The task board: the tasks the coordinator sent to the loader's own map-style workers, from
// which a worker with nothing left takes a task still queued at another (Note [Task stealing]
// in task_board.cpp). Shared by the coordinator and the workers, under its own lock.
#pragma once

#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/messages.hpp"

namespace actorch::actors {

class task_board {
public:
  /// A task a worker took from another's queue: from now on `by` holds batch `seq`.
  struct taken {
    int64_t seq;
    int64_t by;
    int attempt; // of the posting it took
  };

  /// Coordinator side: `task` (attempt `attempt`) goes to worker `owner`; a posting of a new
  /// run drops those of the last, a re-issued batch's replaces its last. Post before sending.
  void post(const index_batch& task, int64_t owner, int attempt);
  /// Coordinator side: the tasks taken since the last call, into `takes`.
  void takes_since(std::vector<taken>& takes);
  /// Coordinator side: worker `owner` died; no other worker may take its tasks from now on (the
  /// coordinator re-issues them once it has collected the takes made before), and its heir
  /// keeps its first task.
  void freeze(int64_t owner);
  /// Coordinator side: drops every posting (the run ended).
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
  static constexpr int64_t kFrozen = -2; // a dead owner's, left for the coordinator to re-issue
  /// Drops every posting and take; the board is now run `run_id`'s. @pre mutex_ held
  void clear_posts(uint64_t run_id);
  struct posting {
    int64_t owner;
    int64_t holder; // the worker loading it once claimed or taken; -1: none yet
    int attempt;
  };

  std::mutex mutex_;
  uint64_t run_id_ = 0;
  std::unordered_map<int64_t, posting> posts_; // by seq: every task of the run
  std::vector<index_batch> open_;              // those no worker has begun, in sending order
  std::vector<bool> started_; // per worker: it has handled a task (so run its worker_init_fn)
  std::vector<taken> taken_;
};

} // namespace actorch::actors
