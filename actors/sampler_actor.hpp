// The sampler actor: the head and the tail of one loader's graph. It emits index batches to the
// sources while it holds credit, collects their replies, collates and pins what a source left
// undone, reorders (in_order) and delivers to the consumer; and it supervises the sources
// (respawns a dead worker and re-issues its batches, turns a stalled one into a timeout).
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include <concurrentqueue/blockingconcurrentqueue.h>

#include "actors/interfaces.hpp"
#include "core/data/buffer_pool.hpp"
#include "core/data/collate.hpp"

namespace actorch::actors {

/// The consumer's queue. Its waits spin briefly before sleeping: moodycamel's default (10000
/// spins) keeps the consumer's core busy while the workers need it (2-core machines).
struct delivery_queue_traits : moodycamel::ConcurrentQueueDefaultTraits {
  static const int MAX_SEMA_SPINS = 100;
};
using delivery_queue = moodycamel::BlockingConcurrentQueue<delivery, delivery_queue_traits>;

struct sampler_config {
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
  std::shared_ptr<delivery_queue> queue;
  std::shared_ptr<std::atomic<uint64_t>> active_generation;
  int max_attempts = 3;            // loads of one batch before a dying worker is an error
};

/// Spawns the sampler (detached: its collate stage may do real work). Send it
/// (epoch_atom, epoch_plan) to start a run and (credit_atom, generation) per released batch;
/// anon_send_exit(it, user_shutdown) stops it and the workers it spawned. (worker_atom, id)
/// answers the source in slot `id` as a caf::actor (tests only).
caf::actor spawn_sampler(caf::actor_system& sys, sampler_config cfg);

} // namespace actorch::actors
