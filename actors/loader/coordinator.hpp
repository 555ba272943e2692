// The sampler: the head and the tail of one loader's graph. It emits index batches to the
// sources while it holds credit, collects their replies, collates and pins what a source left
// undone, reorders (in_order) and delivers to the consumer; and it supervises the sources
// (respawns a dead worker and re-issues its batches, turns a stalled one into a timeout).
// It runs inside an actor that hosts it: the range-for's own blocking actor, on the consumer's
// thread, as PyTorch's main process runs its sampler; or a detached sampler actor for a
// consumer actor. See Note [Sampler host] in sampler_actor.cpp.
#pragma once

#include <deque>
#include <functional>
#include <memory>

#include "actors/loader/batch_shelf.hpp"
#include "actors/interfaces.hpp"
#include "core/data/buffer_pool.hpp"
#include "core/data/collate.hpp"

namespace actorch::actors {

struct coordinator_config {
  std::vector<source_actor> sources;
  /// Makes the replacement of dead source `id`; empty for a user's sources (a dead one is then
  /// an error, and the sampler never stops them).
  std::function<source_actor(int64_t id)> respawn;
  /// The sources are iterable-dataset workers the loader spawned: they stop with the sampler
  /// but are not replaced (a stream cannot be resumed), so a death is an error.
  bool iterable = false;
  /// false: batch_size = nullopt, each task is one sample, converted rather than collated.
  bool auto_collation = true;
  bool in_order = true;
  double timeout_s = 0;            // 0: wait forever for a source
  data::collate_fn collate;        // for batches a source returns uncollated
  data::buffer_pool_ptr pool;      // batch buffers (pinned when pin_memory)
  bool pin_memory = false;
  int max_attempts = 3;            // loads of one batch before a dying worker is an error
  /// Where the sources may leave batches instead of replying (Note [Batch shelf]); the sampler
  /// opens it for in_order, map-style runs without a sink. Null: every batch is a reply.
  std::shared_ptr<batch_shelf> shelf;
};

/// The sampler's state machine. Its host forwards to it what arrives in the host's mailbox:
/// the sources' replies (loaded_batch, or a caf::error), down messages and (timeout_atom, ...)
/// messages; tasks go out in the host's name, so the replies come back there.
class sampler {
public:
  sampler(caf::local_actor* host, coordinator_config cfg);
  ~sampler(); // asks the workers it spawned to exit (Note [Worker death])
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  /// Starts a run, dropping whatever remains of the last. Batches go to plan.sink as
  /// (batch_atom, delivery), or, without a sink, to deliveries().
  void start(epoch_plan plan);
  /// The consumer took a batch of run `run_id` (Note [Loader credits]).
  void credit(uint64_t run_id);
  /// Takes in what the sources left on the shelf and tells them which batch the consumer waits
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

/// The seeds of batches 0..k-1 of stream `w` of `streams` (an iterable dataset's worker), which
/// its first task of a run resumed at its batch k passes over (Note [Iterable resume]).
std::vector<uint64_t> resume_skip_seeds(uint64_t base_seed, int64_t epoch, int64_t k,
                                        int64_t streams, int64_t w);

/// Spawns a sampler actor hosting a sampler, for a consumer actor (detached: its collate stage
/// may do real work). Send it (epoch_atom, epoch_plan) to start a run and (credit_atom,
/// run_id) per batch the consumer is done with; anon_send_exit(it, user_shutdown) stops it
/// and the workers it spawned. (worker_atom, id) answers the source in slot `id` as a
/// caf::actor (tests only).
caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace actorch::actors
