// The coordinator: the head and the tail of one loader's graph. It starts a run from its plan,
// has the dispatcher pick a source per credit and sends it the task (posting it on the task
// board for the loader's own workers), takes the replies (and what the workers left on the
// batch shelf), finishes a batch a user's source left uncollated or unpinned, puts the batches
// in order (reorder buffer) and delivers them to the consumer; the supervisor watches the
// sources' deadlines and deaths. It runs inside an actor that hosts it (host.hpp): the
// range-for's own blocking actor, on the consumer's thread, or a detached coordinator actor
// for a consumer actor (Note [Loader host] in host.cpp).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>

#include "actors/interfaces.hpp"
#include "actors/loader/batch_recipe.hpp"
#include "actors/loader/batch_shelf.hpp"
#include "actors/loader/task_board.hpp"

namespace actorch::actors {

struct coordinator_config {
  std::vector<source_actor> sources;
  /// Makes the replacement of dead source `id`; empty for a user's sources (a dead one is then
  /// an error, and the coordinator never stops them).
  std::function<source_actor(int64_t id)> respawn;
  /// The sources are iterable-dataset workers the loader spawned: they stop with the
  /// coordinator but are not replaced (a stream cannot be resumed), so a death is an error.
  bool iterable = false;
  /// false: batch_size = nullopt, each task is one sample, converted rather than collated.
  bool auto_collation = true;
  bool in_order = true;
  bool round_robin = false; // map-style: the k-th task to source k % sources
  double timeout_s = 0;     // 0: wait forever for a source
  /// The range-for's host calls it every kInterruptSlice (host.hpp) while it waits
  /// (loader_options:: interruption_point); empty: it waits in one piece.
  std::function<void()> interruption_point;
  batch_recipe recipe;  // for batches a source returns uncollated or unpinned
  int max_attempts = 3; // loads of one batch before a dying worker is an error
  /// Where the sources may leave batches instead of replying (Note [Batch shelf]); the
  /// coordinator opens it for in_order, map-style runs without a sink. Null: every batch is a
  /// reply.
  std::shared_ptr<batch_shelf> shelf;
  /// Where the tasks for the loader's own map-style workers are posted, for them to take from
  /// each other (Note [Task stealing]). Null: no stealing.
  std::shared_ptr<task_board> board;
  /// Set once a source's deadline passed (a timeout error): that source may never return, and
  /// the loader's shutdown does not wait for it (Note [Stuck workers] in data_loader.cpp).
  std::shared_ptr<std::atomic<bool>> deadline_passed;
};

/// The coordinator's state machine. Its host forwards to it what arrives in the host's
/// mailbox: the sources' replies (loaded_batch, or a caf::error), down messages and
/// (timeout_atom, ...) messages; tasks go out in the host's name, so the replies come back
/// there.
class coordinator {
public:
  coordinator(caf::local_actor* host, coordinator_config cfg);
  ~coordinator(); // asks the workers it spawned to exit (Note [Worker death])
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;

  /// Starts a run, dropping whatever remains of the last. Batches go to plan.sink as
  /// (batch_atom, delivery), or, without a sink, to deliveries().
  void start(epoch_plan plan);
  /// The consumer took a batch of run `run_id` (Note [Loader credits]).
  void credit(uint64_t run_id);
  /// Takes in what the workers left on the shelf and tells them which batch the consumer waits
  /// for (Note [Batch shelf]). The host calls it before it blocks on its mailbox.
  void collect();
  /// The consumer is done with the run (finished or abandoned): the shelf closes and drops what
  /// it holds, so that no batch buffer stays out of the pool until the next run.
  void finish();
  void on_loaded(loaded_batch& batch, const caf::strong_actor_ptr& from);
  void on_source_error(const caf::error& err, const caf::strong_actor_ptr& from);
  void on_timeout(uint64_t run_id, int64_t seq, int64_t clock);
  void on_down(const caf::down_msg& msg);
  /// The source in slot `id` (null if there is none).
  caf::actor source(int64_t id) const;
  /// What reached the consumer's host (no sink), in delivery order.
  std::deque<delivery>& deliveries();

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace actorch::actors
