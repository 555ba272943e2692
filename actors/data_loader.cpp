// data_loader: options, epochs, the consumer (one path: it takes deliveries from a batch feed,
// the coordinator on its own thread or the inline source), save/resume, and shutdown. The
// stages of a run are in actors/loader/ (docs/architecture.md, "One batch").
#include "actors/data_loader.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>

#include "actors/loader/device_prefetch.hpp"
#include "actors/loader/host.hpp"
#include "actors/loader/inline_source.hpp"
#include "actors/loader/plan.hpp"
#include "actors/loader/slow_samples.hpp"
#include "actors/loader/starvation_meter.hpp"
#include "actors/loader/worker.hpp"
#include "actors/source_loader.hpp"
#include "actors/thread_scope.hpp"
#include "core/cuda_memory.hpp"
#include "core/data/sampler.hpp"
#include "core/data/worker_info.hpp"
#include "core/trace.hpp"

namespace actorch::data {

namespace detail {

// Note [Stuck workers]
// ~~~~~~~~~~~~~~~~~~~~
// A dataset's get() may block for ever (a dead NFS mount, a lock never released). The loader
// cannot stop a thread inside user code, and its actor system's destructor would wait for that
// thread, so leaving the loader's scope (the unwinding that carries a timeout error to the
// caller's catch, or the end of the program) would wait as long as the get() does. So the
// loader's shutdown waits for its actors only as long as a healthy one can take: not at all once
// a deadline has passed (the timed-out worker is stuck by definition), `timeout` when one is set
// (no healthy load takes longer), else kShutdownGrace (PyTorch's _shutdown_workers joins a
// worker process for MP_STATUS_CHECK_INTERVAL, 5 s, before it terminates it). Actors still
// running then are abandoned, with the system they run in, to a detached reaper thread that
// destroys the system once they have returned (if ever), and one line on stderr says so. Until
// then an abandoned worker's memory stays allocated: its thread's stack, the samples and batch
// buffer of its current task, and the loader's actor system (a scheduler thread and a timer
// thread) plus the reaper's thread; the dataset and the buffer pool stay alive through the
// worker's shared pointers, so its get() returns into valid memory, and its reply goes to a
// coordinator that is gone and is dropped. The process exits without waiting for any of them. A
// loader given a system of the caller's (set_actor_system) leaves the waiting to that system's
// owner. A dataset in worker processes (multiprocessing_context "fork") is killed instead:
// Note [Worker processes] in actors/loader/worker_process.cpp.
constexpr std::chrono::seconds kShutdownGrace{5};

void abandon(std::unique_ptr<caf::actor_system> sys,
             std::unique_ptr<caf::actor_system_config> cfg) {
  std::thread([sys = std::move(sys), cfg = std::move(cfg)]() mutable {
    sys->registry().await_running_count_equal(0); // the stuck get() returned, if it ever does
    sys.reset();
    cfg.reset();
  }).detach();
}

struct loader_impl {
  dataset_ptr dataset; // null with a user's source or an iterable dataset
  iterable_dataset_ptr iterable;
  int64_t dataset_size = 0;
  loader_options opts;
  std::shared_ptr<generator> gen;
  batch_sampler_ptr batches;
  actors::batch_recipe recipe; // from opts, with the loader's buffer pool

  /// Past the sampler's last valid index: dataset_size, but none for a keyed_dataset, whose
  /// sampler numbers its other keys from there and which takes any index a sampler yields.
  int64_t index_end() const {
    return dynamic_cast<const keyed_dataset*>(dataset.get()) ? std::numeric_limits<int64_t>::max()
                                                             : dataset_size;
  }

  // Actors: the system (ours unless given), the user's source if any, and the coordinator of
  // the current run (persistent with persistent_workers or a user's source). The range-for's
  // runs in `feed`, on the consumer's thread; a consumer actor's in a detached coordinator
  // actor (Note [Loader host] in actors/loader/host.cpp).
  std::unique_ptr<caf::actor_system_config> own_config; // the system keeps a reference to it
  std::unique_ptr<caf::actor_system> own_system;
  caf::actor_system* system = nullptr;
  std::optional<actors::source_actor> source;
  std::unique_ptr<actors::batch_feed> feed;   // the range-for's: a range_for_host or inline_source
  std::shared_ptr<actors::slow_samples> slow; // worker threads' samples past report_delay
  caf::actor coordinator_actor;               // a consumer actor's
  std::shared_ptr<std::atomic<uint64_t>> active_run_id = std::make_shared<std::atomic<uint64_t>>(0);
  // Note [Stuck workers]
  // ~~~~~~~~~~~~~~~~~~~~
  // Set by the coordinator when a source's deadline passed.
  std::shared_ptr<std::atomic<bool>> deadline_passed = std::make_shared<std::atomic<bool>>(false);

  // The run in progress.
  uint64_t run_id = 0;
  int64_t epoch = 0;
  bool running = false;
  uint64_t base_seed = 0;
  std::optional<uint64_t> next_base_seed; // seed_next_epoch's, for the next epoch only
  // Iterable, resumed mid-epoch: per stream, its batches delivered before (Note [Iterable
  // resume] in actors/loader/plan.cpp).
  std::vector<int64_t> resumed;
  std::vector<int64_t> delivered;
  generator::state gen_at_start{};
  std::optional<generator::state> sampler_gen_at_start;
  std::optional<loader_state> resume;
  sample current;
  starvation_meter meter; // the consumer's waits, for timing()
  // With opts.device: batches copied to the GPU one ahead of the consumer, and, once the feed's
  // run ended while they were ahead, how: null at the end of the epoch, else the error to raise.
  std::unique_ptr<actors::device_prefetch> to_device;
  std::optional<std::exception_ptr> ahead_stop;

  ~loader_impl() { shutdown(); }

  bool uses_actors() const { return source.has_value() || opts.num_workers > 0; }
  bool auto_collation() const { return opts.batch_size.has_value(); }
  int64_t credits() const {
    return opts.prefetch_factor.value_or(2) * std::max<int64_t>(1, opts.num_workers);
  }
  /// Iterable: the streams a state's delivered indices count over (Note [Iterable runs]).
  int64_t streams() const { return std::max<int64_t>(1, opts.num_workers); }
  generator* sampler_rng() const {
    if (!batches)
      return nullptr; // iterable: no sampler
    generator* g = batches->rng();
    return g == gen.get() ? nullptr : g;
  }

  caf::actor_system& sys() {
    if (!system) {
      actors::thread_scope scope; // See Note [CAF's per-thread logger]
      own_config = std::make_unique<caf::actor_system_config>();
      // Every actor of the loader is detached (a thread of its own), so the scheduler's
      // threads have nothing to run; but an idle CAF work-stealing thread polls every 50 us for
      // its first 500 attempts, preempting the dataset workers some 20k times a second on a
      // 2-core machine (docs/performance.md, "CAF's scheduler threads"). One thread,
      // which goes straight to relaxed polling (10 ms sleeps).
      own_config->set("scheduler.max-threads", size_t(1));
      own_config->set("work-stealing.aggressive-poll-attempts", size_t(1));
      own_config->set("work-stealing.moderate-poll-attempts", size_t(1));
      own_system = std::make_unique<caf::actor_system>(*own_config);
      system = own_system.get();
    }
    return *system;
  }

  /// The range-for's host, when the feed is one (num_workers > 0 or a user's source).
  actors::range_for_host* host() const { return dynamic_cast<actors::range_for_host*>(feed.get()); }

  /// Stops the coordinator and the workers it spawned.
  void stop_coordinator() {
    if (auto* h = host()) // the range-for's: asks the workers it spawned to exit
      h->stop();
    if (coordinator_actor) {
      caf::anon_send_exit(coordinator_actor, caf::exit_reason::user_shutdown);
      coordinator_actor = nullptr;
    }
  }

  void shutdown() {
    active_run_id->store(~uint64_t(0));
    stop_coordinator();
    feed.reset();
    if (!own_system)
      return;
    // See Note [Stuck workers].
    using namespace std::chrono;
    const auto grace = deadline_passed->load() ? nanoseconds(0)
                       : opts.timeout > 0
                           ? duration_cast<nanoseconds>(duration<double>(opts.timeout))
                           : duration_cast<nanoseconds>(kShutdownGrace);
    const auto give_up = steady_clock::now() + grace;
    auto& registry = own_system->registry();
    while (registry.running() > 0 && steady_clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(1));
    if (const size_t stuck = registry.running(); stuck > 0) {
      std::fprintf(stderr,
                   "DataLoader: %zu of its actors are still running %.3g s after shutdown began "
                   "(a worker inside the dataset past its deadline, or one that never returns); "
                   "abandoned: the process does not wait for them\n",
                   stuck, duration<double>(grace).count());
      abandon(std::move(own_system), std::move(own_config));
      return;
    }
    own_system.reset(); // every actor has quit (see stop_coordinator)
  }

  /// Ends the run in progress: completed, abandoned or failed. The next run is a new epoch.
  void end_run() {
    if (!running)
      return;
    running = false;
    current = sample();
    if (to_device)
      to_device->clear();
    ahead_stop.reset();
    ++epoch;
    resume.reset();
    active_run_id->store(++run_id); // workers skip what is left of the old run
    if (feed)
      feed->finish();
    if (!(opts.persistent_workers || source))
      stop_coordinator();
  }

  actors::coordinator_config coordinator_config() {
    actors::coordinator_config cfg;
    cfg.in_order = opts.in_order;
    cfg.round_robin = opts.round_robin;
    cfg.iterable = iterable != nullptr;
    cfg.auto_collation = auto_collation();
    // Worker processes keep their deadlines themselves: one that passes it is killed, and
    // replaced with retry_timeouts (Note [Worker processes] in actors/loader/worker_process.cpp).
    const bool processes = !source && (opts.multiprocessing_context == "fork" ||
                                       opts.multiprocessing_context == "spawn");
    cfg.timeout_s = processes ? 0 : opts.timeout;
    cfg.interruption_point = opts.interruption_point;
    cfg.recipe = recipe;
    cfg.deadline_passed = deadline_passed;
    if (source) {
      cfg.sources.push_back(*source);
    } else {
      // Everything the respawn needs is captured by value: the coordinator may call it while the
      // loader is being destroyed (with a caller's actor system, nobody waits for it).
      actors::worker_config proto;
      proto.dataset = dataset;
      proto.iterable = iterable;
      proto.recipe = recipe;
      proto.num_workers = opts.num_workers;
      proto.base_seed = base_seed;
      proto.worker_init_fn = opts.worker_init_fn;
      proto.active_run_id = active_run_id;
      proto.process = processes;
      proto.timeout_s = opts.timeout;
      proto.retry_timeouts = opts.retry_timeouts;
      proto.hooks = opts.fork_hooks;
      if (opts.multiprocessing_context == "spawn")
        proto.spawn = opts.spawn;
      proto.report_delay_s = opts.report_delay;
      if (!processes && opts.report_delay > 0) { // processes report from their parents
        if (!slow) // one watcher for the loader's life, not one per epoch's coordinator
          slow = std::make_shared<actors::slow_samples>(opts.report_delay);
        proto.slow = slow;
      }
      proto.stack_signal = opts.worker_stack_signal;
      // See Note [Batch shelf]: the coordinator alone decides which runs it is open for.
      cfg.shelf = std::make_shared<actors::batch_shelf>();
      proto.shelf = cfg.shelf;
      if (!opts.round_robin) {
        cfg.board = std::make_shared<actors::task_board>(); // Note [Task stealing]
        proto.board = cfg.board;
      }
      // See Note [First batches shared]: threads only (a worker process loads in its child),
      // and not with round_robin, whose per-worker generators must see their own batches' loads.
      if (!processes && !opts.round_robin && !iterable && opts.num_workers > 1)
        proto.sharing = std::make_shared<actors::batch_sharing>(opts.num_workers);
      // See Note [Worker CPUs]: pinned when asked, else spread for their first batch.
      const bool spread = opts.worker_cpus.empty() && opts.num_workers > 1;
      auto spawn = [sys = &sys(), proto, cpus = opts.worker_cpus, spread](int64_t id) {
        actors::worker_config w = proto;
        w.id = id;
        if (!cpus.empty())
          w.cpu = cpus[size_t(id) % cpus.size()];
        else if (spread)
          w.start_cpu = int(id);
        return actors::spawn_dataset_worker(*sys, std::move(w));
      };
      for (int64_t id = 0; id < opts.num_workers; ++id)
        cfg.sources.push_back(spawn(id));
      if (!iterable)
        cfg.respawn = spawn; // See Note [Worker death]
    }
    return cfg;
  }

  /// Draws the epoch's batches and base seed, then starts loading them.
  void start_run(const caf::actor* sink) {
    // Spawns the coordinator or the workers: Note [CAF's per-thread logger].
    actors::thread_scope scope;
    end_run();
    meter.start_epoch();
    if (resume) {
      epoch = resume->epoch;
      gen->set_state(resume->loader_generator);
      if (resume->sampler_generator && sampler_rng())
        sampler_rng()->set_state(*resume->sampler_generator);
    }
    gen_at_start = gen->get_state();
    sampler_gen_at_start.reset();
    if (auto* g = sampler_rng())
      sampler_gen_at_start = g->get_state();
    if (batches)
      batches->loader_epoch(epoch);
    base_seed = next_base_seed ? *next_base_seed : random_u64(*gen);
    next_base_seed.reset();
    delivered.clear();
    resumed.clear();
    if (resume) {
      delivered = resume->delivered;
      if (iterable)
        resumed = actors::resumed_per_stream(delivered, streams());
    }
    std::optional<trace::span> step(std::in_place, "coordinator", "plan epoch");
    actors::epoch_plan p;
    if (batches)
      p.batches = actors::plan_batches(*batches, epoch, delivered, index_end());
    resume.reset();
    running = true;
    active_run_id->store(++run_id);
    p.run_id = run_id;
    p.epoch = epoch;
    p.base_seed = base_seed;
    p.iterable = iterable != nullptr;
    p.resumed = resumed;
    p.credits = credits();
    ACTORCH_CHECK(sink == nullptr || uses_actors(),
                  "DataLoader.run_epoch: needs num_workers > 0 or a source actor");
    ACTORCH_CHECK(sink == nullptr || !opts.device,
                  "DataLoader.run_epoch: the device option is for the range-for; a consumer "
                  "actor copies its batches to its GPU itself");
    if (opts.device && !to_device)
      to_device = std::make_unique<actors::device_prefetch>(
          *opts.device, opts.pin_memory && pinned_memory_is_page_locked());
    if (sink ? host() && host()->core() : coordinator_actor != nullptr)
      stop_coordinator(); // the last run had the other kind of consumer
    if (sink) {
      p.sink = *sink;
      if (!coordinator_actor)
        coordinator_actor = actors::spawn_coordinator(sys(), coordinator_config());
      caf::anon_send(coordinator_actor, actors::epoch_atom::value, std::move(p));
      return;
    }
    if (!feed) {
      step.reset();
      step.emplace("coordinator", "start workers");
      if (uses_actors()) {
        feed = std::make_unique<actors::range_for_host>(sys(),
                                                        [this] { return coordinator_config(); });
      } else {
        actors::inline_source_config c;
        c.dataset = dataset;
        c.iterable = iterable;
        c.auto_collation = auto_collation();
        c.recipe = recipe;
        feed = std::make_unique<actors::inline_source>(std::move(c));
      }
    }
    step.reset();
    step.emplace("coordinator", "send tasks");
    feed->start(std::move(p));
  }

  /// Moves to the next batch of the run; false at the end of the epoch.
  bool advance() {
    if (!running)
      return false;
    // May respawn a worker: Note [CAF's per-thread logger].
    actors::thread_scope scope;
    current = sample(); // release the batch: its buffers go back to the pool
    const auto asked = meter.asking();
    const bool more = to_device ? advance_on_device() : advance_on_host();
    if (more)
      meter.delivered(asked);
    return more;
  }

  bool advance_on_host() {
    actors::delivery d;
    try {
      if (!next_batch(d)) {
        end_run();
        return false;
      }
    } catch (const data_loader::batch_error&) {
      delivered.push_back(d.seq); // the run goes on: ++ takes the next batch
      throw;
    } catch (...) {
      end_run();
      throw;
    }
    current = std::move(d.data);
    delivered.push_back(d.seq);
    return true;
  }

  /// The feed's next batch into `d`; false at the end of the epoch; throws the feed's error.
  bool next_batch(actors::delivery& d) {
    d = feed->next();
    if (d.end_of_epoch)
      return false;
    if (!d.error.empty()) {
      if (d.recoverable && !to_device)
        throw data_loader::batch_error(d.error);
      throw error(d.error);
    }
    return true;
  }

  /// advance() with opts.device: hands over the batch copied to the GPU while the consumer
  /// worked on the last one, then starts copying the next (Note [Device prefetch]). The end of
  /// the epoch or an error met while fetching ahead surfaces once the batches before it are
  /// delivered.
  bool advance_on_device() {
    if (to_device->empty())
      fetch_ahead(); // the epoch's first batch, unless the run already ended
    if (to_device->empty()) {
      const std::exception_ptr stop = ahead_stop.value_or(nullptr);
      end_run();
      if (stop)
        std::rethrow_exception(stop);
      return false;
    }
    actors::device_prefetch::ready r = to_device->take();
    current = std::move(r.data);
    delivered.push_back(r.seq);
    fetch_ahead();
    return true;
  }

  void fetch_ahead() {
    if (ahead_stop)
      return;
    try {
      actors::delivery d;
      if (!next_batch(d)) {
        ahead_stop = nullptr;
        return;
      }
      try {
        to_device->push(std::move(d.data), d.seq);
      } catch (const std::exception& e) {
        throw error(actorch::detail::concat("DataLoader: copying batch ", d.seq, " to ",
                                            opts.device->str(), " failed: ", e.what()));
      }
    } catch (...) {
      ahead_stop = std::current_exception();
    }
  }
};

} // namespace detail

namespace {

void check_options(const loader_options& o, bool custom_source, bool iterable) {
  if (o.device) {
    ACTORCH_CHECK(o.device->is_cuda(), "DataLoader: device must be a CUDA device but got ",
                  *o.device, " (batches are on the CPU without it)");
    const std::string problem = cuda_device_problem(o.device->index);
    ACTORCH_CHECK(problem.empty(), "DataLoader: device ", *o.device, " does not exist: ", problem);
  }
  if (iterable) {
    ACTORCH_CHECK(!o.shuffle, "DataLoader with IterableDataset: expected unspecified shuffle "
                              "option, but got shuffle=true");
    ACTORCH_CHECK(!o.sampler, "DataLoader with IterableDataset: expected unspecified sampler "
                              "option, but got a sampler");
    ACTORCH_CHECK(!o.batch_sampler, "DataLoader with IterableDataset: expected unspecified "
                                    "batch_sampler option, but got a batch_sampler");
  }
  ACTORCH_CHECK(o.num_workers >= 0,
                "DataLoader: num_workers option should be non-negative; use num_workers=0 to "
                "disable multiprocessing (got ",
                o.num_workers, ")");
  ACTORCH_CHECK(o.timeout >= 0, "DataLoader: timeout option should be non-negative (got ",
                o.timeout, ")");
  if (!custom_source)
    ACTORCH_CHECK(o.num_workers > 0 || !o.prefetch_factor,
                  "DataLoader: prefetch_factor option could only be specified in multiprocessing; "
                  "let num_workers > 0 to enable multiprocessing, otherwise leave prefetch_factor "
                  "unset");
  ACTORCH_CHECK(!o.prefetch_factor || *o.prefetch_factor > 0,
                "DataLoader: prefetch_factor option should be positive (got ",
                o.prefetch_factor.value_or(0), ")");
  if (!custom_source)
    ACTORCH_CHECK(!o.persistent_workers || o.num_workers > 0,
                  "DataLoader: persistent_workers option needs num_workers > 0");
  if (!o.multiprocessing_context.empty()) {
    // PyTorch: "multiprocessing_context can only be used with multi-process loading".
    ACTORCH_CHECK(!custom_source, "DataLoader with a source actor: multiprocessing_context "
                                  "option places the built-in dataset workers, which the source "
                                  "replaces");
    ACTORCH_CHECK(o.num_workers > 0, "DataLoader: multiprocessing_context can only be used with "
                                     "multi-process loading (num_workers > 0), but got "
                                     "num_workers=0");
    ACTORCH_CHECK(o.multiprocessing_context == "fork" ||
                      (o.multiprocessing_context == "spawn" && !o.spawn.argv.empty()),
                  "DataLoader: multiprocessing_context '", o.multiprocessing_context,
                  "' is not supported: actorch's workers are threads (\"\", the default), "
                  "forked processes (\"fork\") or, from Python, new programs (\"spawn\", which "
                  "rebuild a Python dataset from its pickle; a C++ dataset cannot be rebuilt so)");
  }
  if (!o.worker_cpus.empty()) {
    ACTORCH_CHECK(!custom_source, "DataLoader with a source actor: worker_cpus option pins the "
                                  "built-in dataset workers, which the source replaces");
    ACTORCH_CHECK(o.num_workers > 0, "DataLoader: worker_cpus option needs num_workers > 0");
    const auto usable = usable_cpus();
    for (int cpu : o.worker_cpus)
      ACTORCH_CHECK(std::find(usable.begin(), usable.end(), cpu) != usable.end(),
                    "DataLoader: worker_cpus option names CPU ", cpu,
                    ", which this thread may not run on (usable_cpus(): ",
                    actors::indices_str({usable.begin(), usable.end()}), ")");
  }
  if (o.batch_sampler)
    ACTORCH_CHECK(o.batch_size == 1 && !o.shuffle && !o.sampler && !o.drop_last,
                  "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                  "shuffle, sampler, and drop_last");
  else if (o.batch_size)
    ACTORCH_CHECK(*o.batch_size > 0,
                  "DataLoader: batch_size should be a positive integer value, but got batch_size=",
                  *o.batch_size);
  else
    ACTORCH_CHECK(!o.drop_last, "DataLoader: batch_size=None option disables auto-batching and "
                                "is mutually exclusive with drop_last");
  ACTORCH_CHECK(!(o.sampler && o.shuffle),
                "DataLoader: sampler option is mutually exclusive with shuffle");
}

std::unique_ptr<detail::loader_impl> make_impl(dataset_ptr ds, iterable_dataset_ptr iterable,
                                               int64_t size, loader_options opts,
                                               bool custom_source) {
  check_options(opts, custom_source, iterable != nullptr);
  auto impl = std::make_unique<detail::loader_impl>();
  impl->dataset = std::move(ds);
  impl->iterable = std::move(iterable);
  impl->dataset_size = size;
  impl->gen = opts.generator ? opts.generator : seeded_from_default();
  if (impl->iterable) {
    // No sampler: the workers' iterators decide what comes.
  } else if (opts.batch_sampler) {
    impl->batches = opts.batch_sampler;
  } else {
    sampler_ptr s = opts.sampler;
    if (!s && opts.shuffle)
      s = std::make_shared<random_sampler>(size, false, -1, impl->gen);
    if (!s)
      s = std::make_shared<sequential_sampler>(size);
    // Unbatched: batches of one index, each converted instead of collated.
    impl->batches = std::make_shared<batch_sampler>(s, opts.batch_size.value_or(1), opts.drop_last);
  }
  impl->recipe = {.batch_size = opts.batch_size.value_or(1),
                  .drop_last = opts.drop_last,
                  .collate = opts.collate_fn,
                  .pool = buffer_pool::make(opts.pin_memory ? pinned_allocator() : cpu_allocator()),
                  .pin_memory = opts.pin_memory};
  impl->opts = std::move(opts);
  return impl;
}

} // namespace

data_loader::data_loader(dataset_ptr dataset, loader_options opts) {
  ACTORCH_CHECK(dataset != nullptr, "DataLoader: null dataset");
  const int64_t n = dataset->size();
  impl_ = make_impl(std::move(dataset), nullptr, n, std::move(opts), false);
  // The actor system starts with the loader (its threads cost milliseconds to start); the
  // workers start with the first epoch, as PyTorch's do.
  if (impl_->opts.num_workers > 0)
    impl_->sys();
}

data_loader::data_loader(iterable_dataset_ptr dataset, loader_options opts) {
  ACTORCH_CHECK(dataset != nullptr, "DataLoader: null dataset");
  impl_ = make_impl(nullptr, std::move(dataset), 0, std::move(opts), false);
  if (impl_->opts.num_workers > 0)
    impl_->sys();
}

data_loader::data_loader(std::unique_ptr<detail::loader_impl> impl) : impl_(std::move(impl)) {}
data_loader::~data_loader() = default;
data_loader::data_loader(data_loader&&) noexcept = default;
data_loader& data_loader::operator=(data_loader&&) noexcept = default;

const sample& data_loader::iterator::operator*() const {
  ACTORCH_CHECK(impl_->running, "DataLoader: dereferencing an iterator past the end of the epoch");
  return impl_->current;
}

data_loader::iterator& data_loader::iterator::operator++() {
  impl_->advance();
  return *this;
}

bool data_loader::iterator::operator==(sentinel) const {
  return !impl_->running;
}

data_loader::iterator data_loader::begin() {
  impl_->start_run(nullptr);
  impl_->advance();
  return iterator(impl_.get());
}

data_loader::iterator data_loader::this_epoch() {
  return iterator(impl_.get());
}

void data_loader::end_epoch(int64_t epoch) {
  if (impl_->running && this->epoch() == epoch)
    impl_->end_run();
}

int64_t data_loader::size() const {
  ACTORCH_CHECK(impl_->batches, "DataLoader: an IterableDataset has no length (len(loader))");
  return impl_->batches->size();
}
int64_t data_loader::epoch() const {
  return impl_->resume ? impl_->resume->epoch : impl_->epoch;
}

void data_loader::manual_seed(uint64_t seed) {
  impl_->gen->manual_seed(seed);
}

void data_loader::seed_next_epoch(uint64_t base_seed) {
  impl_->next_base_seed = base_seed;
}

void data_loader::set_spawn_payload(std::string payload) {
  ACTORCH_CHECK(!impl_->opts.spawn.argv.empty(),
                "DataLoader: a spawn payload for a loader whose workers are not spawned");
  impl_->opts.spawn.payload = std::move(payload);
}

loader_state data_loader::state() const {
  const auto& m = *impl_;
  if (m.resume)
    return *m.resume;
  loader_state s;
  s.epoch = m.epoch;
  if (m.iterable)
    s.streams = m.streams();
  if (m.running) {
    s.delivered = m.delivered;
    s.loader_generator = m.gen_at_start;
    s.sampler_generator = m.sampler_gen_at_start;
  } else {
    s.loader_generator = m.gen->get_state();
    if (auto* g = m.sampler_rng())
      s.sampler_generator = g->get_state();
  }
  return s;
}

void data_loader::load_state(const loader_state& s) {
  if (impl_->iterable && !s.delivered.empty()) {
    ACTORCH_CHECK(s.streams == impl_->streams(),
                  "DataLoader with IterableDataset: cannot resume mid-epoch from a state of ",
                  s.streams, " streams on a loader of ", impl_->streams(),
                  " (num_workers=", impl_->opts.num_workers,
                  "): each worker iterates its own stream, so resume with the same num_workers");
    (void)actors::resumed_per_stream(s.delivered, s.streams); // checks them now, not at begin()
  }
  ACTORCH_CHECK(impl_->iterable || s.delivered.empty() || s.streams == 0,
                "DataLoader: cannot resume mid-epoch from an IterableDataset loader's state (",
                s.streams, " streams) on a map-style dataset");
  impl_->end_run();
  impl_->resume = s;
}

loader_timing data_loader::timing() const {
  return impl_->meter.timing();
}

buffer_pool::stats data_loader::pool_stats() const {
  return impl_->recipe.pool->get_stats();
}
const loader_options& data_loader::options() const {
  return impl_->opts;
}

void data_loader::run_epoch(const caf::actor& sink) {
  impl_->start_run(&sink);
}

void data_loader::set_actor_system(caf::actor_system& sys) {
  ACTORCH_CHECK(!impl_->feed && !impl_->coordinator_actor,
                "DataLoader.set_actor_system: the loader's actors already run");
  impl_->own_system.reset(); // no actor of it was spawned yet
  impl_->own_config.reset();
  impl_->system = &sys;
}

caf::actor data_loader::worker_for_testing(int64_t id) {
  actors::coordinator* core = impl_->host() ? impl_->host()->core() : nullptr;
  ACTORCH_CHECK(core || impl_->coordinator_actor,
                "DataLoader.worker_for_testing: no actors running");
  if (core)
    return core->source(id); // the range-for's, on this thread
  // See Note [CAF's per-thread logger].
  actors::thread_scope scope;
  caf::scoped_actor self{impl_->sys()};
  caf::actor out;
  self->request(impl_->coordinator_actor, caf::infinite, actors::worker_atom::value, id)
      .receive([&](caf::actor& a) { out = std::move(a); },
               [&](caf::error& e) {
                 ACTORCH_FAIL("DataLoader.worker_for_testing(", id, "): ", caf::to_string(e));
               });
  return out;
}

data_loader make_source_loader(caf::actor_system& sys, actors::source_actor source,
                               int64_t dataset_size, loader_options opts) {
  ACTORCH_CHECK(source != nullptr, "DataLoader: null source actor");
  ACTORCH_CHECK(dataset_size >= 0, "DataLoader: negative dataset size ", dataset_size);
  auto impl = make_impl(nullptr, nullptr, dataset_size, std::move(opts), true);
  impl->system = &sys;
  impl->source = std::move(source);
  return data_loader(std::move(impl));
}

} // namespace actorch::data
