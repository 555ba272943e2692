// actorch::data::data_loader: torch.utils.data.DataLoader rebuilt on actors. A range-for over
// the loader is one epoch of batches:
//
//   data_loader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2});
//   for (const sample& batch : loader) train(batch[0].as_tensor(), batch[1].as_tensor());
//
// Behind it, a coordinator sends index batches under credit to detached dataset-worker actors,
// which load, collate and pin them; the coordinator reorders them (in_order) and delivers
// them. For the range-for the coordinator runs in the consumer's own thread, inside a CAF
// blocking actor, as PyTorch's main process runs its sampler; for a consumer actor
// (run_epoch), in a detached coordinator actor (actors/loader/, docs/architecture.md, "One
// batch"). With num_workers = 0 the
// consumer's thread loads the batches itself, no actors involved. An
// iterable dataset has no sampler: each worker iterates its own iter() and the loader
// interleaves their batches round-robin.
// This header includes no CAF: CAF-facing entry points are in actors/source_loader.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "actors/loader/starvation_meter.hpp"
#include "core/data/batch_sampler.hpp"
#include "core/data/buffer_pool.hpp"
#include "core/data/collate.hpp"
#include "core/data/dataset.hpp"
#include "core/data/worker_info.hpp"
#include "core/random.hpp"

namespace caf {
class actor;
class actor_system;
} // namespace caf

namespace actorch::data {

/// DataLoader's options, with PyTorch's names and defaults.
struct loader_options {
  /// Samples per batch; std::nullopt disables automatic batching (PyTorch's batch_size=None):
  /// each sample goes through collate_fn on its own (default: default_convert, no batch dim).
  std::optional<int64_t> batch_size = 1;
  /// Reshuffle every epoch (a RandomSampler over the loader's generator).
  bool shuffle = false;
  sampler_ptr sampler{};
  /// Yields whole batches; excludes batch_size (other than 1), shuffle, sampler, drop_last.
  batch_sampler_ptr batch_sampler{};
  /// Worker actors loading in parallel; 0 loads in the consumer's thread.
  int64_t num_workers = 0;
  /// Replaces default_collate. Unbatched (batch_size = nullopt), it replaces default_convert and
  /// receives each sample alone, in a one-element list.
  data::collate_fn collate_fn{};
  /// Batches in pinned host memory (pinned_allocator()).
  bool pin_memory = false;
  /// Beyond PyTorch (whose users call .to(device, non_blocking=True) in the loop; DALI's and
  /// Lightning's loaders prefetch like this): a CUDA device the range-for's batches arrive on.
  /// Each batch is copied on a copy stream of the loader's while the consumer's stream works on
  /// the batch before it, and the consumer's current stream waits for the copy (Note [Device
  /// prefetch] in actors/loader/device_prefetch.cpp). Set pin_memory too: from pageable
  /// memory the copies cannot overlap. Not for run_epoch's consumer actors.
  std::optional<actorch::device> device{};
  /// Drop the last, short batch; with an iterable dataset, each worker's last short batch.
  bool drop_last = false;
  /// Seconds a worker may spend on one batch, counted from when it can begin it (its earlier
  /// batches are back), before the epoch fails with PyTorch's error, "DataLoader timed out
  /// after N seconds", then the worker and the batch; 0: forever. PyTorch's bounds the wait for
  /// a batch instead: see Note [Loader timeout] in actors/loader/supervisor.cpp.
  double timeout = 0;
  /// Beyond PyTorch: a worker process past `timeout` is killed and replaced and its batch
  /// loaded again, as one that died (3 attempts, then the epoch's error), instead of ending the
  /// epoch. A worker thread cannot be killed: for it a timeout is always the error.
  bool retry_timeouts = false;
  /// Beyond PyTorch: a worker process still loading one batch after this many seconds is named
  /// on stderr, with the batch's sample indices and how long it has been at it (and its stack,
  /// where fork_hooks::stack_signal asks the child for it), once per batch, while it goes on;
  /// a worker thread in one sample that long, with the sample's index and batch, once per
  /// sample (actors/loader/slow_samples.hpp); 0: never.
  double report_delay = 10;
  /// A signal a worker process answers by printing its stack on stderr, sent with its
  /// report_delay report (the Python module's: SIGUSR1, which faulthandler answers); 0: none.
  int worker_stack_signal = 0;
  /// Called with the worker id on each worker's thread before its first batch (in the worker's
  /// process with multiprocessing_context "fork").
  std::function<void(int64_t)> worker_init_fn{};
  /// Called on the consumer's thread every 100 ms while the range-for waits for a batch from
  /// its workers; what it throws ends the epoch (the workers stopped, their processes killed)
  /// and reaches the loop. The Python module's raises a pending KeyboardInterrupt so.
  std::function<void()> interruption_point{};
  /// Where the workers run. "" (the default): threads of this process, as actorch's workers
  /// always did (PyTorch's are always processes). "fork": each worker loads in a child process
  /// of its own, forked on its first batch, so that a crash or a hang in the dataset's code
  /// kills the child and not the program: the worker is replaced and the batch loaded again
  /// (the epoch fails only after max 3 attempts at one batch), and `timeout` kills a load that
  /// passes it (the epoch's error, or with retry_timeouts a death as above). Costs a copy of each
  /// batch and a process per worker: Note [Worker processes] in actors/loader/worker_process.cpp,
  /// docs/performance.md. A batch's tensors (and strings of 4 KiB or more) come back through shared
  /// memory, its structure and short strings in a message of at most 64 MiB; a child whose reply
  /// passes that is killed as a crashed one is. "spawn": the same, each child a new program
  /// (`spawn`) that rebuilds the dataset itself (the Python module's, from a pickle); a C++ dataset
  /// object cannot be rebuilt so, and the C++ API takes "spawn" only with `spawn` set. Only with
  /// num_workers > 0, as PyTorch requires.
  std::string multiprocessing_context{};
  /// With multiprocessing_context "spawn": the program each worker process runs, and what it
  /// is told first (Note [Spawned workers] in actors/loader/worker_process.cpp).
  data::spawn_command spawn{};
  /// Run around each worker process's fork(), on the forking worker's thread: how an embedded
  /// runtime keeps its state sound across the fork (the Python module takes the GIL and calls
  /// CPython's PyOS_BeforeFork / PyOS_AfterFork_Parent / PyOS_AfterFork_Child, as os.fork
  /// does). `before` runs first; then `parent` in this process, `child` in the new one before it
  /// runs worker_init_fn. Any of them may be empty. Only with multiprocessing_context "fork".
  data::fork_hooks fork_hooks{};
  /// Draws the shuffle order and the base seed; one seeded from the default generator if null.
  std::shared_ptr<actorch::generator> generator{};
  /// Batches in flight per worker (2 when unset): prefetch_factor x num_workers in all, queued
  /// at the least busy worker, and a worker with nothing left takes one still queued at another
  /// (Note [Task stealing] in actors/loader/task_board.cpp); only with num_workers > 0.
  std::optional<int64_t> prefetch_factor{};
  /// Keep the workers alive across epochs.
  bool persistent_workers = false;
  /// Deliver batches in sampler order; false: as soon as they are ready.
  bool in_order = true;
  /// Beyond PyTorch, as DGL's and PyG's loaders offer: pin worker i's thread to CPU
  /// worker_cpus[i % size()] before its worker_init_fn runs (which may widen it again). Empty,
  /// the default: the kernel places the workers, as PyTorch's. Each must be in usable_cpus();
  /// only with num_workers > 0. Note [Worker CPUs] in actors/loader/worker.cpp and
  /// docs/performance.md say when it pays.
  std::vector<int> worker_cpus{};
  /// As PyTorch's loader sends them: the k-th batch of an epoch goes to worker k %
  /// num_workers, and no worker takes another's (Note [Task stealing] in
  /// actors/loader/task_board.cpp). What code drawing from per-worker generators needs to
  /// repeat a run (random, numpy or torch seeded per worker process: the Python module sets it
  /// for Python datasets). false, the default: the least busy worker gets the next batch, and
  /// idle workers take queued ones; batch randomness from batch_generator() repeats either way.
  bool round_robin = false;
};

/// Where a loader stands, to resume mid-epoch with exactly the batches it would have given.
struct loader_state {
  int64_t epoch = 0;
  /// Batch indices of `epoch` the consumer already received (in order when in_order). With an
  /// iterable dataset, batch k of worker w's stream has the index k * streams + w.
  std::vector<int64_t> delivered{};
  /// With an iterable dataset, the number of streams (num_workers, or 1 without workers): a
  /// state resumes mid-epoch only on a loader with as many. 0 for a map-style dataset.
  int64_t streams = 0;
  /// Generator states at the start of `epoch` (the sampler's when it has its own).
  generator::state loader_generator{};
  std::optional<generator::state> sampler_generator{};
};

namespace detail {
struct loader_impl;
}

class data_loader {
public:
  /// Checks the options (throwing actorch::error naming the option) and builds the sampler.
  /// Actors start with the first epoch.
  explicit data_loader(dataset_ptr dataset, loader_options opts = {});
  /// Over an iterable dataset (PyTorch's IterableDataset): shuffle, sampler and batch_sampler
  /// must be unset. Each worker calls dataset->iter() on its own thread with get_worker_info()
  /// set; without splitting on it, every worker yields the whole stream, as in PyTorch. Batches
  /// are collated in the workers and delivered round-robin across them (in_order); the epoch
  /// ends when every worker's stream has ended. num_workers = 0 iterates in the consumer's
  /// thread. size() is not available. A mid-epoch load_state() needs the same num_workers and
  /// re-reads each stream up to where it stood, dropping what was delivered (Note [Iterable
  /// resume] in actors/loader/plan.cpp), so the dataset must yield the same streams again.
  explicit data_loader(iterable_dataset_ptr dataset, loader_options opts = {});
  /// Used by make_source_loader (actors/source_loader.hpp).
  explicit data_loader(std::unique_ptr<detail::loader_impl> impl);
  /// Stops every actor of the loader; waits for dataset calls already running only as long as
  /// a healthy one takes, then abandons them (Note [Stuck workers] in data_loader.cpp).
  ~data_loader();
  data_loader(data_loader&&) noexcept;
  data_loader& operator=(data_loader&&) noexcept;

  /// A batch's own failure (its dataset's or collate's exception, in a map-style epoch of the
  /// range-for): the epoch goes on after it.
  class batch_error : public error {
  public:
    using error::error;
  };

  struct sentinel {};
  class iterator {
  public:
    using value_type = sample;
    using difference_type = std::ptrdiff_t;
    const sample& operator*() const;
    const sample* operator->() const { return &**this; }
    /// Releases the current batch (its buffers go back to the pool) and waits for the next,
    /// whose credit goes back to the coordinator as it is taken (Note [Loader credits]).
    iterator& operator++();
    bool operator==(sentinel) const;

  private:
    friend class data_loader;
    explicit iterator(detail::loader_impl* impl) : impl_(impl) {}
    detail::loader_impl* impl_;
  };

  /// Starts an epoch (abandoning what is left of a previous one) and waits for its first batch.
  /// Throws actorch::error for a failed batch: the dataset's or collate's exception (naming the
  /// worker, the sample index and the original message), a timeout, a sampler index out of
  /// range. A map-style dataset's or collate's exception is a batch_error, after which the
  /// epoch goes on (as torch's iterator): ++ on the iterator (this_epoch() when begin() threw)
  /// takes the next batch. Any other error ends the epoch.
  iterator begin();
  /// The iterator of the epoch in progress: where a begin() that threw a batch_error left it.
  iterator this_epoch();
  /// Ends `epoch` if it is still in progress, for a consumer that stops early (torch's iterator
  /// shuts its workers down when it is dropped mid-epoch): its batches still in flight are
  /// dropped and, without persistent_workers, its workers stop now instead of at the next
  /// begin() or the loader's end. The next begin() starts epoch + 1, as it would have. Nothing
  /// happens when that epoch already ended or another began.
  void end_epoch(int64_t epoch);
  sentinel end() const { return {}; }

  /// Batches per epoch (len(loader)); samples per epoch when unbatched. Throws for an iterable
  /// dataset, which has no length.
  int64_t size() const;
  /// The epoch the next begin() starts (or the one in progress).
  int64_t epoch() const;
  /// Restarts the loader's generator at `seed` (torch.Generator.manual_seed): the shuffle and
  /// the workers' base seed of the epochs begun after it. A sampler with a generator of its own
  /// keeps it. actorch.DataLoader calls it at each iter() with a seed drawn from the torch
  /// generator, as torch's loader draws its epoch's seeds.
  void manual_seed(uint64_t seed);
  /// The next epoch's base seed, exactly, instead of one drawn from the loader's generator:
  /// worker i's seed is base_seed + i (get_worker_info().seed), as torch's workers' are.
  /// actorch.DataLoader passes the value torch's loader would draw, so that a worker's torch,
  /// random and numpy generators start where torch's would. For one epoch.
  void seed_next_epoch(uint64_t base_seed);
  /// With multiprocessing_context "spawn": the payload of the worker processes started from
  /// the next epoch on (actorch.DataLoader pickles the dataset again at each iter(), as torch's
  /// loader pickles it for each epoch's workers, so that they see what changed in it).
  void set_spawn_payload(std::string payload);
  /// Where the loader stands; load_state() on a loader built the same way resumes there.
  loader_state state() const;
  void load_state(const loader_state& s);
  /// The current (or last) epoch's timing as the range-for consumer saw it: the time to its
  /// first batch and the starvation figure (the share of the step spent waiting for a batch).
  loader_timing timing() const;
  /// The batch buffer pool (bounded-memory checks).
  buffer_pool::stats pool_stats() const;
  const loader_options& options() const;

  /// Runs one epoch for a consumer actor: each batch arrives as (batch_atom, delivery) and the
  /// actor replies (credit_atom, delivery.run_id) to the sender once done with it; the
  /// last message has end_of_epoch set (or a non-empty error). Needs num_workers > 0 or a
  /// user's source, and a loader built on the actor's system (make_source_loader, or
  /// set_actor_system before the first epoch).
  void run_epoch(const caf::actor& sink);
  /// Runs the loader's actors in `sys` (which must outlive the loader) instead of its own.
  void set_actor_system(caf::actor_system& sys);

  /// Test-only (supervision tests kill workers): the actor now serving worker slot `id`, asked
  /// of the coordinator through its mailbox, so the answer follows every message it got
  /// before. @pre an epoch with workers (or a source) was started.
  caf::actor worker_for_testing(int64_t id);

private:
  std::unique_ptr<detail::loader_impl> impl_;
};

} // namespace actorch::data
