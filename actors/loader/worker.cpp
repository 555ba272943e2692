// The dataset worker actor and the batch loading it shares with the inline source and, to
// finish a user's source's batches, the coordinator.
#include "actors/loader/worker.hpp"

#include <optional>
#include <sstream>

#include "actors/loader/plan.hpp"
#include "actors/loader/worker_process.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

namespace {

/// One batch as its samples are loaded. With automatic batching and the default collate_fn
/// each sample goes into a collator at once (Note [Streaming collate]); otherwise they are kept
/// for the collate_fn, or, unbatched, for default_convert.
class batch_builder {
public:
  batch_builder(int64_t capacity, bool auto_collation, const batch_recipe& recipe)
      : auto_collation_(auto_collation), collate_(recipe.collate), pool_(recipe.pool.get()),
        pin_memory_(recipe.pin_memory) {
    // An empty batch (a batch_sampler's) goes down the list path, to default_collate's error.
    if (auto_collation && !collate_ && capacity > 0)
      into_.emplace(capacity, pool_);
    else
      samples_.reserve(size_t(capacity));
  }

  bool streaming() const { return into_.has_value(); }

  /// Takes the next sample; throws if it does not agree with the batch so far (streaming).
  void add(data::sample s) {
    if (into_)
      into_->add(s);
    else
      samples_.push_back(std::move(s));
  }

  /// The batch into out.data, pinned when asked; an exception becomes out.error, prefixed by
  /// failure(), which builds the message only then (not once per batch).
  template <class Failure> void finish(loaded_batch& out, const Failure& failure) {
    try {
      if (into_) {
        out.data = into_->finish(); // into the pool: pinned already with pin_memory
      } else if (!auto_collation_) {
        // Unbatched: collate_fn sees the one sample (in a one-element list); the default
        // converts it, out of the pool, so pinning is a copy.
        out.data = collate_ ? collate_(std::move(samples_))
                            : data::default_convert(std::move(samples_[0]));
        if (pin_memory_ && pool_)
          out.data = data::pin_memory(out.data, *pool_);
      } else if (collate_) {
        out.data = collate_(std::move(samples_));
        if (pin_memory_ && pool_)
          out.data = data::pin_memory(out.data, *pool_);
      } else {
        out.data = data::default_collate(std::move(samples_), pool_);
      }
      out.pinned = pin_memory_;
    } catch (const std::exception& e) {
      out.error = failure() + e.what();
    }
  }

private:
  bool auto_collation_;
  const data::collate_fn& collate_;
  data::buffer_pool* pool_;
  bool pin_memory_;
  std::optional<data::collator> into_;
  std::vector<data::sample> samples_;
};

// Note [Batched fetch]
// ~~~~~~~~~~~~~~~~~~~~
// torch's loader fetches a batch with one dataset.__getitems__(indices) call where the dataset
// defines it (Hugging Face's datasets do, reading a slice of rows at once), and collates what it
// returns, however many samples that is. A dataset that says fetches_batches() gets the same:
// one get_many() per batch, its samples collated as they come back. Such a batch is loaded by
// its own worker alone (Note [First batches shared] shares single samples), its samples draw in
// turn from the generator sample 0 would have (one call cannot be given one per sample), and the
// slow-sample report names no sample (a worker process's report still names the batch).
std::vector<data::sample> fetch_batch(const data::dataset& ds, const index_batch& task,
                                      const std::string& who, std::string& error) {
  data::batch_scope randomness(data::sample_seed(task.seed, 0));
  try {
    return ds.get_many(task.indices);
  } catch (const std::exception& e) {
    error = who + " failed to fetch batch " + std::to_string(task.seq) + " (sample indices " +
            indices_str(task.indices) + "): " + e.what();
    return {};
  }
}

} // namespace

loaded_batch load_batch(const index_batch& task, const data::dataset& ds,
                        const batch_recipe& recipe, const std::string& who,
                        const std::atomic<uint64_t>* active_run_id, batch_sharing* sharing) {
  loaded_batch out;
  out.run_id = task.run_id;
  out.seq = task.seq;
  auto collate_failure = [&] {
    return who + " failed to collate batch " + std::to_string(task.seq) + " (sample indices " +
           indices_str(task.indices) + "): ";
  };
  const auto load_begin = trace::clock::now();
  // A new run started (early exit, new epoch): stop loading what nobody will read.
  auto cancelled = [&] {
    return active_run_id && active_run_id->load(std::memory_order_relaxed) != task.run_id;
  };
  std::optional<std::vector<data::sample>> fetched; // Note [Batched fetch]
  if (task.auto_collation && ds.fetches_batches()) {
    if (cancelled()) {
      out.error = "cancelled";
      return out;
    }
    std::string error;
    fetched = fetch_batch(ds, task, who, error);
    if (!error.empty()) {
      out.error = std::move(error);
      return out;
    }
  }
  batch_builder batch(int64_t(fetched ? fetched->size() : task.indices.size()), task.auto_collation,
                      recipe);
  // See Note [First batches shared]: an earlier batch open to all comes before this one.
  auto help_earlier = [&] {
    while (auto earlier = sharing->earliest_before(task.run_id, task.seq))
      if (cancelled() || !batch_sharing::load_next(*earlier, ds, who))
        break;
  };
  if (fetched) {
    for (auto& s : *fetched) {
      try {
        batch.add(std::move(s));
      } catch (const std::exception& e) {
        out.error = collate_failure() + e.what();
        return out;
      }
    }
  } else if (sharing && sharing->shares(task)) {
    const auto open = sharing->open(task);
    const batch_sharing::closing_guard close{*sharing, *open};
    const int64_t n = int64_t(task.indices.size());
    int64_t added = 0;
    // Collates the samples that are in, in order, as far as they go (with `wait`: all of
    // them); false, with out.error set, when one failed.
    auto collate_in = [&](bool wait) {
      while (added < n) {
        data::sample s;
        std::string error;
        const auto state = batch_sharing::take(*open, added, wait, s, error);
        if (state == batch_sharing::open_batch::slot::pending)
          return true;
        if (state == batch_sharing::open_batch::slot::lost) // its loader died: load it here
          s = load_sample(ds, task.indices, added, task.seed, task.seq, who, error);
        if (!error.empty()) {
          out.error = std::move(error);
          return false;
        }
        try {
          batch.add(std::move(s));
        } catch (const std::exception& e) {
          out.error = collate_failure() + e.what();
          return false;
        }
        ++added;
      }
      return true;
    };
    for (;;) {
      help_earlier();
      if (cancelled()) {
        out.error = "cancelled";
        return out;
      }
      if (!batch_sharing::load_next(*open, ds, who))
        break;
      if (!collate_in(false))
        return out;
    }
    if (!collate_in(true))
      return out;
  } else {
    for (size_t i = 0; i < task.indices.size(); ++i) {
      if (sharing)
        help_earlier();
      if (cancelled()) {
        out.error = "cancelled";
        return out;
      }
      std::string error;
      data::sample s = load_sample(ds, task.indices, int64_t(i), task.seed, task.seq, who, error);
      if (!error.empty()) {
        out.error = std::move(error);
        return out;
      }
      try {
        batch.add(std::move(s));
      } catch (const std::exception& e) {
        out.error = collate_failure() + e.what();
        return out;
      }
    }
  }
  // A collate_fn draws from a generator of its own, the one after the last sample's.
  data::batch_scope randomness(data::sample_seed(task.seed, int64_t(task.indices.size())));
  const auto collate_begin = trace::clock::now();
  batch.finish(out, collate_failure);
  if (trace::enabled()) {
    const std::string args =
        "\"epoch\": " + std::to_string(task.epoch) + ", \"batch\": " + std::to_string(task.seq);
    const std::string seq = std::to_string(task.seq);
    if (batch.streaming()) {
      const char* what =
          recipe.pin_memory ? "load + collate + pin batch " : "load + collate batch ";
      trace::record(who, what + seq, load_begin, collate_begin, args);
    } else {
      trace::record(who, "load batch " + seq, load_begin, collate_begin, args);
      trace::record(who, recipe.pin_memory ? "collate + pin" : "collate", collate_begin,
                    trace::clock::now(), args);
    }
  }
  return out;
}

loaded_batch load_stream_batch(const index_batch& task, const data::iterable_dataset& ds,
                               std::unique_ptr<data::sample_iterator>& it,
                               const batch_recipe& recipe, const std::string& who) {
  loaded_batch out;
  out.run_id = task.run_id;
  out.seq = task.seq;
  const int64_t want = task.auto_collation ? recipe.batch_size : 1;
  // The stream's next sample (nullopt at its end); false, with `out.error` naming `where`, if
  // iter() or next() threw.
  auto pull = [&](std::optional<data::sample>& s, auto&& where) {
    try {
      if (!it)
        it = ds.iter();
      s = it->next();
      return true;
    } catch (const std::exception& e) {
      out.error =
          who + " failed while iterating the IterableDataset (" + where() + "): " + e.what();
      return false;
    }
  };
  // See Note [Iterable resume] in plan.cpp: the batches delivered before the state was
  // saved are pulled again, each under its own generator, and dropped.
  for (size_t j = 0; j < task.skip_seeds.size(); ++j) {
    data::batch_scope randomness(task.skip_seeds[j]);
    for (int64_t count = 0; count < want; ++count) {
      std::optional<data::sample> s;
      if (!pull(s, [&] {
            return "resuming: passing over batch " + std::to_string(j) +
                   " of its stream, delivered before";
          }))
        return out;
      if (!s) { // the stream is shorter than when the state was saved
        out.end_of_data = true;
        return out;
      }
    }
  }
  data::batch_scope randomness(task.seed);
  batch_builder batch(want, task.auto_collation, recipe);
  // A sample that breaks the batch is reported only if the batch is not dropped, as PyTorch
  // collates (and fails) only a batch it keeps.
  std::string collate_error;
  int64_t count = 0;
  while (count < want) {
    std::optional<data::sample> s;
    if (!pull(s, [&] {
          return "batch " + std::to_string(task.seq) + ", after " + std::to_string(count) +
                 " samples of it";
        }))
      return out;
    if (!s)
      break;
    ++count;
    if (!collate_error.empty())
      continue;
    try {
      batch.add(std::move(*s));
    } catch (const std::exception& e) {
      collate_error = e.what();
    }
  }
  // The stream ended: nothing left, or only a short batch that drop_last drops (per worker,
  // as PyTorch drops each worker's last partial batch).
  if (count == 0 || (recipe.drop_last && task.auto_collation && count < want)) {
    out.end_of_data = true;
    return out;
  }
  auto failure = [&] {
    return who + " failed to collate batch " + std::to_string(task.seq) +
           " of the IterableDataset: ";
  };
  if (!collate_error.empty())
    out.error = failure() + collate_error;
  else
    batch.finish(out, failure);
  return out;
}

// Note [Loader stages]
// ~~~~~~~~~~~~~~~~~~~~
// Collate and pin-memory run inside the dataset workers (in parallel, as PyTorch collates in
// its workers), writing straight into pooled, pinned when asked, buffers. The coordinator runs
// them, through this same function, only for batches a user's source returns uncollated or
// unpinned.
void finish_batch(loaded_batch& b, bool auto_collation, const batch_recipe& recipe,
                  const std::function<std::string()>& failure) {
  if (b.collated) {
    if (recipe.pin_memory && !b.pinned) {
      try {
        b.data = data::pin_memory(b.data, *recipe.pool);
        b.pinned = true;
      } catch (const std::exception& e) {
        b.error = failure() + e.what();
      }
    }
    return;
  }
  auto samples = std::move(b.data.as_tuple());
  b.data = data::sample();
  b.collated = true;
  if (!auto_collation && samples.size() != 1) {
    b.error = failure() + "an unbatched task returned " + std::to_string(samples.size()) +
              " samples, expected 1";
    return;
  }
  batch_builder batch(int64_t(samples.size()), auto_collation, recipe);
  try {
    for (auto& sample : samples)
      batch.add(std::move(sample));
  } catch (const std::exception& e) {
    b.error = failure() + e.what();
    return;
  }
  batch.finish(b, failure);
}

namespace {

struct worker_state {
  worker_config cfg;
  data::worker_info info;
  bool initialized = false;
  std::string name;
  // An iterable worker's pass: the iterator of run `iter_run_id`, and whether it ended.
  std::unique_ptr<data::sample_iterator> it;
  uint64_t iter_run_id = 0;
  bool exhausted = false;
  // Its child process, with cfg.process (Note [Worker processes] in worker_process.cpp).
  std::unique_ptr<worker_process> proc;
  // With cfg.start_cpu: the CPUs it may use again once its first batch is loaded.
  std::vector<int> unpin_after_first;
};

using worker_pointer = source_actor::stateful_pointer<worker_state>;

// Note [Worker CPUs]
// ~~~~~~~~~~~~~~~~~~
// With loader_options::worker_cpus, each worker pins its thread to one CPU before its first
// batch; worker_init_fn runs after, so a user's own affinity there wins. It is off by default,
// as PyTorch does not pin, and a library should not: a pinned worker cannot move away from a
// CPU that other work (the trainer's, another process's) keeps busy. Where the workers have
// the CPUs to themselves it helps: a worker that ran dry under in_order is woken by the
// consumer's thread, then running on the other CPU; the kernel often queues it on the CPU of
// the worker still loading, and once two workers share a CPU the next wakes keep them there
// while the consumer's CPU idles. The workers block in CAF's mailbox wait (a futex), so the
// consumer cannot give the kernel the hint a pipe write gives, that the waker is about to
// sleep. Measured with perf sched and bench/loader_efficiency.py: docs/performance.md,
// "Worker CPUs".
// Without worker_cpus, the workers' threads are still spread for their first batch: after
// worker_init_fn, worker i keeps to the i-th of the CPUs it may use until its first batch is
// loaded, then may run on all of them again. The workers of a fresh loader otherwise often shared
// one CPU for tens of milliseconds, just when the first batches (Note [First batches shared])
// needed every core: the images workload's first batch took 69-93 ms in half the runs and 41-54 ms
// in the others (moving each thread once at its start did not keep them apart: the wake-ups of the
// shared batch brought them together again); spread for the first batch, see docs/performance.md,
// "Images".

loaded_batch load_one(worker_state& s, const index_batch& task);

/// Pins the calling thread (Note [Worker CPUs]), then runs worker_init_fn: what failed, or "".
std::string run_init(worker_state& s) {
  const char* step = "pinning to a CPU";
  try {
    if (s.cfg.cpu >= 0)
      data::pin_thread_to_cpu(s.cfg.cpu);
    step = "worker_init_fn";
    if (s.cfg.worker_init_fn)
      s.cfg.worker_init_fn(s.cfg.id);
    step = "keeping to a CPU for the first batch";
    if (s.cfg.cpu < 0 && s.cfg.start_cpu >= 0) {
      // Among the CPUs it may use now, worker_init_fn's choice included.
      std::vector<int> allowed = data::usable_cpus();
      if (allowed.size() > 1) {
        data::pin_thread_to_cpu(allowed[size_t(s.cfg.start_cpu) % allowed.size()]);
        s.unpin_after_first = std::move(allowed);
      }
    }
  } catch (const std::exception& e) {
    return s.name + ": " + step + " failed: " + e.what();
  }
  return {};
}

/// With cfg.process: forks the worker's child, which runs run_init and loads with its own copy
/// of `s`. See Note [Worker processes].
void start_process(worker_state& s) {
  auto init = [&s](allocator* batches) {
    // In the child: its copy of the state collates into a pool of its own over the shared file
    // (the parent's lock and pinned pages are the parent's), and the parent alone knows which
    // run is current (it cancels; the child's copy of the flag would stay stale).
    s.cfg.recipe.pool = data::buffer_pool::make(batches);
    s.cfg.recipe.pin_memory = false;
    s.cfg.active_run_id = nullptr;
    return run_init(s);
  };
  std::string first; // a spawned child's first frame (Note [Spawned workers])
  if (!s.cfg.spawn.argv.empty())
    first = worker_process::spawn_frame({s.cfg.id, s.cfg.num_workers, s.cfg.base_seed,
                                         s.cfg.recipe.batch_size, s.cfg.recipe.drop_last, s.cfg.cpu,
                                         s.cfg.start_cpu},
                                        s.cfg.spawn.payload);
  s.proc = std::make_unique<worker_process>(
      s.name, init, [&s](const index_batch& task) { return load_one(s, task); },
      s.cfg.recipe.pool.get(), s.cfg.recipe.pin_memory, s.cfg.timeout_s, s.cfg.retry_timeouts,
      s.cfg.active_run_id.get(), s.cfg.hooks, s.cfg.report_delay_s, s.cfg.stack_signal, s.cfg.spawn,
      std::move(first));
}

/// Before the worker's first batch: run_init on this thread, or with cfg.process in the child it
/// forks; false (and `out` the error) if that failed.
bool initialize(worker_state& s, const index_batch& task, loaded_batch& out) {
  if (s.initialized)
    return true;
  s.initialized = true;
  std::string error;
  if (s.cfg.process) {
    try {
      start_process(s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  } else {
    error = run_init(s);
  }
  if (error.empty())
    return true;
  out.run_id = task.run_id;
  out.seq = task.seq;
  out.worker = s.cfg.id;
  out.error = std::move(error);
  return false;
}

loaded_batch load_task(worker_state& s, const index_batch& task);

/// Loads `task` on this worker's thread; the reply names this worker.
loaded_batch load_one(worker_state& s, const index_batch& task) {
  loaded_batch out = load_task(s, task);
  if (!s.unpin_after_first.empty()) { // See Note [Worker CPUs]
    data::allow_thread_cpus(s.unpin_after_first);
    s.unpin_after_first.clear();
  }
  return out;
}

/// Loads `task` in the worker's child process, whose copy of a keyed dataset learns the keys of
/// the task's indices with it (Note [Sampler keys] in python/src/python_dataset.cpp).
loaded_batch load_in_child(worker_state& s, const data::keyed_dataset* keyed,
                           const index_batch& task) {
  std::string keys;
  try {
    if (keyed)
      keys = keyed->keys_of(task.indices);
  } catch (const std::exception& e) { // a batch error, as a get() failing in the child
    loaded_batch out;
    out.run_id = task.run_id;
    out.seq = task.seq;
    out.error =
        s.name + " cannot hand batch " + std::to_string(task.seq) + " to its process: " + e.what();
    return out;
  }
  if (keys.empty())
    return s.proc->load(task);
  index_batch with_keys = task;
  with_keys.keys = std::move(keys);
  return s.proc->load(with_keys);
}

loaded_batch load_task(worker_state& s, const index_batch& task) {
  const auto* keyed = dynamic_cast<const data::keyed_dataset*>(s.cfg.dataset.get());
  if (s.proc) { // the parent of a worker process: the child loads (with its own load_one)
    loaded_batch out = load_in_child(s, keyed, task);
    out.worker = s.cfg.id;
    return out;
  }
  if (keyed && !task.keys.empty())
    keyed->learn_keys(task.keys);
  if (s.cfg.dataset) {
    const slow_samples::batch_scope watched(s.cfg.slow.get(), s.name);
    loaded_batch out = load_batch(task, *s.cfg.dataset, s.cfg.recipe, s.name,
                                  s.cfg.active_run_id.get(), s.cfg.sharing.get());
    out.worker = s.cfg.id;
    return out;
  }
  // Iterable: a new run (epoch) starts a new pass with a fresh iter(), on this thread, with
  // get_worker_info() set, so that the dataset can split the stream between the workers.
  if (task.run_id != s.iter_run_id) {
    s.it.reset();
    s.exhausted = false;
    s.iter_run_id = task.run_id;
  }
  loaded_batch out;
  out.run_id = task.run_id;
  out.seq = task.seq;
  if (s.cfg.active_run_id && s.cfg.active_run_id->load(std::memory_order_relaxed) != task.run_id) {
    out.error = "cancelled";
  } else if (s.exhausted) {
    out.end_of_data = true;
  } else {
    out = load_stream_batch(task, *s.cfg.iterable, s.it, s.cfg.recipe, s.name);
    s.exhausted = out.end_of_data || !out.error.empty();
  }
  out.worker = s.cfg.id;
  return out;
}

source_actor::behavior_type dataset_worker(worker_pointer self, worker_config cfg) {
  auto& st = self->state;
  st.info = {cfg.id, cfg.num_workers, cfg.base_seed + uint64_t(cfg.id), cfg.dataset, cfg.iterable};
  st.name = "DataLoader worker " + std::to_string(cfg.id);
  st.cfg = std::move(cfg);
  // Note [Worker crash]
  // ~~~~~~~~~~~~~~~~~~~
  // An exception escaping a handler (one not derived from std::exception,
  // which load_batch does not catch) kills this actor; the supervisor sees it go down, spawns a
  // replacement and re-issues its batch. Quietly: the coordinator reports it if it persists.
  // A worker process that died ends its worker the same way, with the message saying how.
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const worker_process_died& died) {
      if (died.timed_out_seq >= 0) // the batch's error, not a death to heal (retry_timeouts)
        return caf::make_error(caf::sec::request_timeout, died.message, died.timed_out_seq);
      return caf::make_error(caf::sec::runtime_error, died.message);
    } catch (...) {
      return caf::sec::runtime_error;
    }
  });
  return {
      [self](load_atom, const index_batch& task) -> caf::result<loaded_batch> {
        auto& s = self->state;
        data::worker_scope scope(&s.info);
        loaded_batch out;
        if (!initialize(s, task, out))
          return out;
        const auto host = caf::actor_cast<caf::actor>(self->current_sender());
        // A request gets its response (the source_actor contract); the coordinator's tasks are
        // plain messages, whose results may come in any way (Note [Loader host] in host.cpp).
        if (!s.cfg.board || !host || self->current_message_id().is_request())
          return load_one(s, task);
        // See Note [Task stealing]: a task another worker took is skipped; after its own, a
        // worker with nothing else coming loads what waits in another's queue.
        if (!s.cfg.board->claim(task, s.cfg.id))
          return caf::delegated<loaded_batch>{};
        const caf::strong_actor_ptr me{self->ctrl()};
        std::optional<index_batch> next;
        for (const index_batch* t = &task; t != nullptr; t = next ? &*next : nullptr) {
          out = load_one(s, *t);
          const uint64_t run_id = t->run_id;
          // See Note [Batch shelf]: a batch the consumer is not waiting for wakes nobody.
          if (!s.cfg.shelf || !s.cfg.shelf->offer(out, me))
            caf::unsafe_send_as(self, host, std::move(out));
          next = s.cfg.board->next_for(run_id, s.cfg.id);
        }
        return caf::delegated<loaded_batch>{};
      },
  };
}

} // namespace

source_actor spawn_dataset_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn<caf::detached>(dataset_worker, std::move(cfg));
}

void serve_spawned_worker(int sock, int shm_fd, pid_t parent, worker_config cfg,
                          std::string init_error) {
  worker_state s;
  s.info = {cfg.id, cfg.num_workers, cfg.base_seed + uint64_t(cfg.id), cfg.dataset, cfg.iterable};
  s.name = "DataLoader worker " + std::to_string(cfg.id);
  s.cfg = std::move(cfg);
  s.cfg.recipe.pin_memory = false; // as a forked child's (start_process)
  s.cfg.active_run_id = nullptr;
  s.cfg.process = false;
  s.initialized = true;
  data::worker_scope scope(&s.info);
  worker_process::serve(
      sock, shm_fd, parent, s.name,
      [&](allocator* batches) {
        s.cfg.recipe.pool = data::buffer_pool::make(batches);
        return init_error.empty() ? run_init(s) : s.name + ": " + init_error;
      },
      [&s](const index_batch& task) { return load_one(s, task); });
}

} // namespace actorch::actors
