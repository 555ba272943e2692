// The sampler and the sampler actor. See sampler_actor.hpp for their roles.
//
// Note [Sampler host]: the sampler is a state machine inside an actor that hosts it. Tasks go
// out as plain messages in the host's name; a source's reply (its handler's result) comes back
// to the host as an ordinary message, and so do down messages and timeouts. For the range-for
// the host is the consumer's own blocking actor, on the consumer's thread, as PyTorch's main
// process runs its sampler: a batch costs one wake-up (the worker's reply waking the consumer)
// and the credit is a function call. The sampler first ran as a detached actor between the
// workers and the consumer's queue: three wake-ups per batch (the reply, the delivery, the
// credit), and on two cores each one preempted a worker: 10% of the P=20 loader benchmark,
// measured side by side. A consumer actor keeps a detached sampler actor as host, since it
// can only talk by messages.
//
// Note [Loader credits]: CAF 0.17's stream stages do not keep back-pressure across a stage, so
// flow control is explicit. A run starts with `credits` = prefetch_factor x num_workers. The
// sampler emits one index batch per credit; the credit comes back when the consumer takes the
// batch: the range-for as it dequeues it, a consumer actor by replying credit_atom once done
// with it (an actor's mailbox is its queue, so release is the only moment it can name). So at
// most `credits` batches are in flight between the sampler and the consumer, whatever the
// speeds (loading, waiting in the reorder buffer, queued), plus the one the range-for holds:
// PyTorch's count, where a task is outstanding until the main process receives its batch.
// Counting the held batch as well (as this loader first did) leaves a worker with nothing
// queued behind its current batch once per batch, idle for the credit's round trip: 6% of the
// P=20 loader benchmark. Batch memory is bounded by construction, and with buffers recycled
// through the pool a steady-state epoch allocates nothing.
//
// Note [Loader stages]: collate and pin-memory run inside the dataset workers (in parallel, as
// PyTorch collates in its workers), writing straight into pooled, pinned when asked, buffers.
// The sampler runs them only for batches a user's source returns uncollated or unpinned.
//
// Note [In order]: with in_order the sampler delivers batches in sampler order: a batch that
// arrives early waits in `ready` until every earlier one went out. It cannot deadlock: batches
// are emitted in order, so the next one to deliver was always emitted and holds a credit.
// Errors are delivered in order too (the consumer sees the batch before the failure first),
// except timeouts, which go out at once.
//
// Note [Worker death]: the sampler monitors its workers rather than linking to them: CAF makes
// an exit_msg with exit_reason::kill fatal to a linked actor whatever its exit handler, so a
// killed worker would take the sampler (and the epoch) down with it. A worker that dies (an
// exception not derived from std::exception, a kill) sends its down message (its tasks still
// queued are dropped with it); that replaces the worker (a new actor in the same slot, same id)
// and re-issues the batches it held with attempt + 1. A reply is taken only from the source
// that holds its batch now, of the current run (run_id); so are timeouts of the current
// attempt; the down message of a worker replaced already is dropped. After max_attempts loads
// of one batch, the death is an error. An iterable worker is not replaced: its stream cannot be
// resumed, so its death is an error. The workers the sampler owns do not outlive it: its
// destructor (the sampler actor's state, or the loader ending the run) asks them to exit.
//
// Note [Batch shelf]: with in_order, a batch that arrives before an earlier one can only wait in
// the reorder buffer; as a reply it still wakes the consumer's thread, blocked on the batch it
// waits for, and on two cores that wake preempts a worker for nothing. With two workers finishing
// in turn, 0.4 of the 1.4 wakes per batch of the P=20 loader benchmark were of that kind. So the
// loader's own workers (not a user's source) offer each finished batch to a shelf they share with
// the sampler. In a map-style, in_order run of the range-for the shelf keeps it, and the worker
// replies with nothing, unless it is the batch the consumer waits for; in any other run the sampler
// keeps the shelf closed. The consumer's thread collects the shelf (its batches go through
// on_loaded as replies would, sender included) and, under the shelf's lock, names the batch it now
// waits for: before it blocks, when it returns a credit, before it handles a deadline or a down
// message; and again until the shelf is empty. So the batch it blocks for is never on the shelf,
// and a shelved batch is neither timed out nor re-issued. (Deadlines fire in the order their
// clocks started, so a collect before blocking again usually takes a shelved batch in before its
// own deadline is read; the one before a deadline does not rely on that.) Errors and ends of
// streams always come as replies. A shelved batch holds its credit, so the bound of Note [Loader
// credits] stands. Measured at P=20 over 100000 samples: 3222 context switches per epoch instead
// of 5144, 7% less CPU time, 2% more samples/s at the median of interleaved runs.
//
// Note [Iterable runs]: with an iterable dataset there is no index plan. Each worker iterates
// its own iter() (split by the user through get_worker_info(), or the whole stream each). Batch
// k of worker w's stream, of n workers, has the index (seq) k * n + w: its place in the
// round-robin as long as no stream has ended. The sampler hands out, one task per credit, the
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
// Note [Iterable resume]: a stream cannot be rewound, so a run resumed mid-epoch passes over
// what was delivered before: delivered batches are, per worker, the first few of its stream
// (a worker answers its tasks in order, and in_order delivers in index order), so the state's
// delivered indices say how many batches of each stream to skip. The first task of a worker's
// run carries their seeds; the worker pulls those batches' samples under them and drops them
// (no collate), then loads its own. The skipped batches still cost their loading (as
// torchdata's StatefulDataLoader's fast-forward does for a dataset without a state of its own),
// so that task's deadline is the timeout times the batches it covers (Note [Loader timeout]).
//
// Note [Loader timeout]: PyTorch's `timeout` bounds the main process's wait for a batch. Here a
// deadline bounds a source's work on one task. A source takes its tasks in the order they were
// sent (or a taken one first: Note [Task stealing]), so only the first of its queue runs a clock:
// from its send, when the source had nothing else, or from when the task before it came back. (A
// batch left on the shelf is seen at the next collect, so the next clock starts late rather than
// early; a user's source that answers out of order only gets more time.) Counting every task from
// its send, as this loader first did, timed out a healthy worker whose batches take more than
// timeout / prefetch_factor: the task queued behind the one in progress waited for it on its own
// clock. Clocks are numbered, and a deadline whose number is no longer its task's is dropped: its
// task came back, was re-issued, or changed hands (Note [Task stealing]).
//
// Note [Task stealing]: a worker's tasks queue in its mailbox, two of them with the default
// prefetch_factor. When a worker is slow on a batch, the batch queued behind it waits as well;
// with in_order the consumer waits for both, holding the credits, so the other worker runs dry
// and idles, and once woken the kernel may put it on the busy worker's CPU (Note [Worker CPUs]
// in dataset_worker.cpp). So the sampler posts each task for the loader's own map-style
// workers on a board in the shelf they share (under its lock), and a worker done with a batch,
// with no task of its own on the way, takes the earliest task that no worker has begun, loads
// it, and sends it back as it does its own: to the shelf, or as a message to the host. (It may
// take the task an owner was about to begin, but not the first task of a worker yet to begin:
// every worker loads one and runs its worker_init_fn, as each of PyTorch's does, and an error
// there reaches the consumer. The cost: a worker that ran dry while all that was left were
// such first tasks is not woken when their owners begin; its next task comes from the sampler,
// as before.) A posting stays for the run, and the owner skips the task when its message for it
// comes after another took it (or after it was re-issued elsewhere): each posting is loaded
// once. The sampler learns who took what at each collect (or when a batch comes from a worker
// it did not send it to) and moves the task to the taker's queue, at its head (the taker had
// nothing left, so it is on it now), with a fresh clock (a late start, never an early one); a
// task sent to the taker meanwhile gets its clock when the taken one is back. When a worker
// dies, its tasks are frozen on the board first (no longer taken), then the takes made before
// are collected, so that only the tasks it still held are re-issued, each replacing its
// posting, and none is both taken and re-issued. An iterable worker's tasks are its own
// stream's, and a user's source is opaque: neither is posted. PyTorch's workers take nothing
// from each other (each has its own index queue, filled round-robin); here which worker loads a
// batch may change, the batch does not (Note [Batch randomness]). Measured on the P=20 loader
// benchmark, alternating builds with and without it, in seven sets of 20 to 150 rounds at
// N=10000 and N=100000: faster in 336 of 570 rounds, by 0.3% to 9.3% at each set's median; in
// traced epochs at N=100000, each worker's waits over 50 us fell from 57-134 to 10-49 while
// the two CPUs ran at the same speed. When one ran much slower than the other, the faster
// worker still waited: then all the credits were held by its own batches, done and waiting
// for the slow one's, which stealing cannot help.
#include "actors/loader/coordinator.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "actors/loader/worker.hpp"
#include "core/data/worker_info.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

namespace {

struct outstanding_task {
  int64_t worker;
  int attempt;
  int64_t covers;    // the batches its load takes: 1, more for a catch-up (Note [Iterable resume])
  int64_t clock = 0; // its running deadline's number, 0: none (Note [Loader timeout])
};

/// A reply waiting in the reorder buffer; `skip`: an iterable worker's end_of_data (no batch).
struct ready_entry {
  delivery d;
  bool skip = false;
};

} // namespace

struct sampler::impl {
  caf::local_actor* self; // the host: see Note [Sampler host]
  coordinator_config cfg;
  std::vector<source_actor> sources;
  // Per source, its outstanding tasks (seqs) in the order sent: it works on the first
  // (Note [Loader timeout]).
  std::vector<std::deque<int64_t>> queued;
  // Iterable (Note [Iterable runs]), per source: the stream batch index of its next task, the
  // one its stream ended at (kNoEnd: not seen yet), and those delivered before a resume.
  std::vector<int64_t> next_k, end_k, resumed_k;
  int64_t seq_frontier = 0; // iterable: one past the highest seq handed out
  epoch_plan plan;
  bool active = false;
  bool failed = false;
  size_t next_emit = 0; // position in plan.batches
  int64_t credit = 0;
  std::unordered_map<int64_t, outstanding_task> outstanding; // by seq
  std::unordered_map<int64_t, size_t> position;              // seq -> position
  int64_t clocks = 0;                                        // deadlines started, to number them
  std::vector<batch_shelf::taken> takes; // scratch for apply_takes (Note [Task stealing])
  std::map<size_t, ready_entry> ready;                       // reorder buffer, by position
  size_t next_deliver = 0;
  size_t delivered = 0;
  std::deque<delivery> out; // deliveries for the host's own consumer (no sink)

  /// See Note [Worker death]: the workers this sampler spawned stop with it.
  ~impl() {
    if (cfg.respawn || cfg.iterable)
      for (auto& s : sources)
        caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }
};

namespace {

using state = sampler::impl;

std::string source_name(const state& st, int64_t w) {
  return (st.cfg.respawn || st.cfg.iterable ? "DataLoader worker " : "DataLoader source ") +
         std::to_string(w);
}

/// The slot of the source that sent `from`, or -1.
int64_t slot_of(const state& st, const caf::strong_actor_ptr& from) {
  const auto addr = caf::actor_cast<caf::actor_addr>(from);
  for (size_t w = 0; w < st.sources.size(); ++w)
    if (addr && addr == st.sources[w].address())
      return int64_t(w);
  return -1;
}

/// The dataset indices of batch `seq` (none for an iterable run), for messages and tasks.
const std::vector<int64_t>& indices_of(const state& st, int64_t seq) {
  static const std::vector<int64_t> none;
  return st.plan.iterable ? none : st.plan.batches[st.position.at(seq)].second;
}

/// The run whose batches the shelf may keep (0: none) and the batch the consumer waits for.
uint64_t shelf_run_id(const state& st) {
  const bool open = st.active && !st.failed && st.cfg.in_order && !st.plan.iterable &&
                    !st.plan.sink;
  return open ? st.plan.run_id : 0;
}

/// Whether the sources are the loader's own map-style workers, which take tasks from each
/// other's queues (Note [Task stealing]).
bool steals(const state& st) {
  return st.cfg.shelf && st.cfg.respawn && !st.plan.iterable;
}

int64_t wanted_seq(const state& st) {
  return st.next_deliver < st.plan.batches.size() ? st.plan.batches[st.next_deliver].first : -1;
}

constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

bool ended(const state& st, size_t w) { return st.end_k[w] != kNoEnd; }

/// Iterable: whether in_order has nothing to wait for at `pos` (Note [Iterable runs]): a batch
/// delivered before a resume, or past the end of its worker's stream.
bool passed_over(const state& st, size_t pos) {
  if (!st.plan.iterable || int64_t(pos) >= st.seq_frontier)
    return false;
  const size_t n = st.sources.size(), w = pos % n;
  const int64_t k = int64_t(pos / n);
  return k < st.resumed_k[w] || k >= st.end_k[w];
}

bool run_complete(const state& st) {
  if (!st.plan.iterable)
    return st.delivered == st.plan.batches.size();
  for (size_t w = 0; w < st.sources.size(); ++w)
    if (!ended(st, w))
      return false;
  return st.outstanding.empty() && st.ready.empty();
}

void push(state& st, delivery d) {
  if (!d.error.empty())
    st.failed = true; // the run ends with the first error the consumer sees
  if (trace::enabled()) {
    const auto now = trace::clock::now();
    trace::record("sampler", "deliver batch " + std::to_string(d.seq), now, now,
                  "\"batch\": " + std::to_string(d.seq));
  }
  if (st.plan.sink)
    caf::unsafe_send_as(st.self, st.plan.sink, batch_atom::value, std::move(d));
  else
    st.out.push_back(std::move(d));
}

/// Delivers batch `seq` (or its error; or nothing, `skip`, for an iterable worker's
/// end_of_data), in order unless urgent or !in_order; then ends the run if it is complete.
void deliver(state& st, int64_t seq, data::sample data, std::string error, bool urgent = false,
             bool skip = false) {
  if (trace::enabled() && !skip) {
    const auto now = trace::clock::now();
    trace::record("sampler", "batch " + std::to_string(seq) + " loaded", now, now,
                  "\"batch\": " + std::to_string(seq));
  }
  delivery d;
  d.run_id = st.plan.run_id;
  d.seq = seq;
  d.data = std::move(data);
  d.error = std::move(error);
  if (!st.cfg.in_order || urgent) {
    if (!skip) {
      push(st, std::move(d));
      ++st.delivered;
    }
  } else {
    // See Note [In order]. An end_of_data at a place already passed over is not waited for.
    const size_t pos = st.position.at(seq);
    if (!(skip && pos < st.next_deliver))
      st.ready.emplace(pos, ready_entry{std::move(d), skip});
    for (;;) {
      if (st.ready.empty() || st.ready.begin()->first != st.next_deliver) {
        if (!passed_over(st, st.next_deliver))
          break;
        ++st.next_deliver;
        continue;
      }
      auto& entry = st.ready.begin()->second;
      const bool err = !entry.d.error.empty();
      if (!entry.skip) {
        push(st, std::move(entry.d));
        ++st.delivered;
      }
      st.ready.erase(st.ready.begin());
      ++st.next_deliver;
      if (err)
        break;
    }
  }
  if (!st.failed && st.active && run_complete(st)) {
    delivery end;
    end.run_id = st.plan.run_id;
    end.end_of_epoch = true;
    push(st, std::move(end));
    st.active = false;
  }
}

/// With a timeout, schedules the deadline of batch `seq`, which its source begins now
/// (Note [Loader timeout]).
void start_clock(state& st, int64_t seq) {
  if (st.cfg.timeout_s <= 0)
    return;
  outstanding_task& task = st.outstanding.at(seq);
  task.clock = ++st.clocks;
  auto& clock = st.self->home_system().clock();
  clock.schedule_message(
      clock.now() +
          std::chrono::microseconds(int64_t(st.cfg.timeout_s * double(task.covers) * 1e6)),
      caf::strong_actor_ptr{st.self->ctrl()},
      caf::make_mailbox_element(nullptr, caf::make_message_id(), caf::no_stages,
                                timeout_atom::value, st.plan.run_id, seq, task.clock));
}

/// Sends batch `seq` to source `w`; `skip_seeds`: see Note [Iterable resume].
void dispatch(state& st, int64_t seq, int64_t w, int attempt,
              std::vector<uint64_t> skip_seeds = {}) {
  index_batch task;
  task.run_id = st.plan.run_id;
  task.epoch = st.plan.epoch;
  task.seq = seq;
  task.indices = indices_of(st, seq);
  task.seed = data::batch_seed(st.plan.base_seed, st.plan.epoch, seq);
  task.auto_collation = st.cfg.auto_collation;
  st.outstanding[seq] = {w, attempt, 1 + int64_t(skip_seeds.size())};
  task.skip_seeds = std::move(skip_seeds);
  auto& queue = st.queued[size_t(w)];
  queue.push_back(seq);
  if (steals(st))
    st.cfg.shelf->post(task, w, attempt);
  // The reply comes back to the host as an ordinary message (Note [Sampler host]).
  caf::unsafe_send_as(st.self, st.sources[size_t(w)], load_atom::value, std::move(task));
  if (queue.size() == 1)
    start_clock(st, seq);
}

/// Batch `seq` came back (or was dropped) from source `w`: the next of its queue, if any, is
/// the one it works on now (Note [Loader timeout]).
void retire(state& st, int64_t w, int64_t seq) {
  auto& queue = st.queued[size_t(w)];
  const auto it = std::find(queue.begin(), queue.end(), seq);
  if (it == queue.end())
    return;
  const bool head = it == queue.begin();
  queue.erase(it);
  if (head && !queue.empty())
    start_clock(st, queue.front());
}

/// See Note [Task stealing]: the tasks workers took from others' queues since the last call
/// change hands here (nothing to do unless the sources steal). A taker had nothing left, so it
/// works on the task now: first in its queue, clock started (late, when the taking is learnt: never
/// early), and the head it displaces (sent to it after it took) waits without a deadline until the
/// taken one comes back.
void apply_takes(state& st) {
  if (!steals(st))
    return;
  st.cfg.shelf->takes_since(st.takes);
  for (const auto& t : st.takes) {
    auto it = st.outstanding.find(t.seq);
    if (it == st.outstanding.end() || it->second.attempt != t.attempt || it->second.worker == t.by)
      continue; // back already, or re-issued after a death since it was taken
    retire(st, it->second.worker, t.seq);
    it->second.worker = t.by;
    auto& queue = st.queued[size_t(t.by)];
    if (!queue.empty())
      st.outstanding.at(queue.front()).clock = 0;
    queue.push_front(t.seq);
    start_clock(st, t.seq);
  }
}

void pump(state& st) {
  if (st.plan.iterable) {
    // See Note [Iterable runs]: the least index among the sources not known exhausted (the
    // least batch of its stream, ties to the lowest id).
    const size_t n = st.sources.size();
    while (st.active && !st.failed && st.credit > 0) {
      size_t w = n;
      for (size_t i = 0; i < n; ++i)
        if (!ended(st, i) && (w == n || st.next_k[i] < st.next_k[w]))
          w = i;
      if (w == n)
        return;
      const int64_t k = st.next_k[w]++;
      const int64_t seq = k * int64_t(n) + int64_t(w);
      std::vector<uint64_t> skip_seeds; // See Note [Iterable resume]
      if (k == st.resumed_k[w])
        skip_seeds = resume_skip_seeds(st.plan.base_seed, st.plan.epoch, k, int64_t(n),
                                       int64_t(w));
      st.seq_frontier = std::max(st.seq_frontier, seq + 1);
      st.position[seq] = size_t(seq);
      --st.credit;
      dispatch(st, seq, int64_t(w), 0, std::move(skip_seeds));
    }
    return;
  }
  while (st.active && !st.failed && st.credit > 0 && st.next_emit < st.plan.batches.size()) {
    // The least busy source; ties go to the lowest id.
    size_t w = 0;
    for (size_t i = 1; i < st.queued.size(); ++i)
      if (st.queued[i].size() < st.queued[w].size())
        w = i;
    const int64_t seq = st.plan.batches[st.next_emit].first;
    ++st.next_emit;
    --st.credit;
    dispatch(st, seq, int64_t(w), 0);
  }
}

void replace_source(state& st, int64_t w, const caf::error& reason) {
  if (!st.cfg.respawn) {
    if (st.active && !st.failed)
      deliver(st, -1, {},
              source_name(st, w) +
                  (st.cfg.iterable ? " died while iterating the IterableDataset (a stream "
                                     "cannot be resumed): "
                                   : " stopped: ") +
                  caf::to_string(reason),
              true);
    return;
  }
  // A new worker in slot w. The old one is dead already (or about to be: kill it).
  st.self->demonitor(st.sources[size_t(w)].address());
  caf::anon_send_exit(st.sources[size_t(w)], caf::exit_reason::kill);
  st.sources[size_t(w)] = st.cfg.respawn(w);
  st.self->monitor(st.sources[size_t(w)]);
  const std::deque<int64_t> lost = std::exchange(st.queued[size_t(w)], {});
  if (!st.active || st.failed)
    return;
  for (const int64_t seq : lost) { // in the order they were sent
    const int attempt = st.outstanding.at(seq).attempt + 1;
    if (attempt >= st.cfg.max_attempts) {
      deliver(st, seq, {},
              source_name(st, w) + " died " + std::to_string(attempt) +
                  " times while loading batch " + std::to_string(seq) + " (sample indices " +
                  indices_str(indices_of(st, seq)) + "); last exit reason: " +
                  caf::to_string(reason),
              true);
      return;
    }
    dispatch(st, seq, w, attempt);
  }
}

} // namespace

sampler::sampler(caf::local_actor* host, coordinator_config cfg) : impl_(std::make_unique<impl>()) {
  auto& st = *impl_;
  st.self = host;
  st.cfg = std::move(cfg);
  st.sources = st.cfg.sources;
  st.queued.assign(st.sources.size(), {});
  // See Note [Worker death]. An exit from the loader stops a sampler actor (CAF's default).
  for (auto& s : st.sources)
    host->monitor(s);
}

sampler::~sampler() = default;

std::deque<delivery>& sampler::deliveries() { return impl_->out; }

void sampler::start(epoch_plan plan) {
  auto& st = *impl_;
  st.plan = std::move(plan);
  st.active = true;
  st.failed = false;
  st.next_emit = 0;
  st.credit = st.plan.credits;
  st.outstanding.clear();
  st.ready.clear();
  st.position.clear();
  for (size_t i = 0; i < st.plan.batches.size(); ++i)
    st.position[st.plan.batches[i].first] = i;
  st.next_deliver = 0;
  st.delivered = 0;
  for (auto& queue : st.queued)
    queue.clear();
  st.resumed_k = st.plan.resumed;
  st.resumed_k.resize(st.sources.size(), 0);
  st.next_k = st.resumed_k;
  st.end_k.assign(st.sources.size(), kNoEnd);
  st.seq_frontier = 0;
  collect(); // drops what the last run left on the shelf, and opens it for this run
  if (!st.plan.iterable && st.plan.batches.empty()) {
    delivery end;
    end.run_id = st.plan.run_id;
    end.end_of_epoch = true;
    push(st, std::move(end));
    st.active = false;
    return;
  }
  pump(st);
}

void sampler::credit(uint64_t run_id) {
  auto& st = *impl_;
  if (run_id != st.plan.run_id)
    return;
  ++st.credit;
  collect(); // so that pump sees the sources' true load
  pump(st);
}

void sampler::collect() {
  auto& st = *impl_;
  if (!st.cfg.shelf)
    return;
  // See Note [Batch shelf]: delivering what it held moves the wanted batch on, so again.
  for (;;) {
    // Takes first: a batch on the shelf may be a taken one. One taken after this is caught by
    // on_loaded, which looks again.
    apply_takes(st);
    auto items = st.cfg.shelf->wait_for(shelf_run_id(st), wanted_seq(st));
    if (items.empty())
      return;
    for (auto& item : items)
      on_loaded(item.batch, item.from);
  }
}

void sampler::finish() {
  if (impl_->cfg.shelf) {
    impl_->cfg.shelf->wait_for(0, -1);
    impl_->cfg.shelf->drop_posts();
  }
}

void sampler::on_loaded(loaded_batch& b, const caf::strong_actor_ptr& from) {
  auto& st = *impl_;
  if (b.run_id != st.plan.run_id || !st.active || st.failed)
    return;
  const int64_t seq = b.seq;
  auto it = st.outstanding.find(seq);
  const int64_t w = slot_of(st, from);
  if (it != st.outstanding.end() && it->second.worker != w)
    apply_takes(st); // it may have been taken (Note [Task stealing])
  if (it == st.outstanding.end() || it->second.worker != w)
    return; // a reply of an older attempt (Note [Worker death]), or a duplicate
  st.outstanding.erase(it);
  retire(st, w, seq);
  if (b.end_of_data && b.error.empty()) {
    // See Note [Iterable runs]: no batch, and its credit comes straight back.
    st.end_k[size_t(w)] = std::min(st.end_k[size_t(w)], seq / int64_t(st.sources.size()));
    ++st.credit;
    deliver(st, seq, {}, {}, false, true);
    pump(st);
    return;
  }
  if (b.error.empty()) {
    // See Note [Loader stages].
    try {
      if (!b.collated) {
        auto samples = std::move(b.data.as_tuple());
        if (st.cfg.collate) {
          b.data = st.cfg.collate(std::move(samples));
        } else if (st.cfg.auto_collation) {
          b.data = data::default_collate(std::move(samples), st.cfg.pool.get());
          b.pinned = st.cfg.pin_memory;
        } else {
          ACTORCH_CHECK(samples.size() == 1, "an unbatched task returned ", samples.size(),
                        " samples, expected 1");
          b.data = data::default_convert(std::move(samples[0]));
        }
      }
      if (st.cfg.pin_memory && !b.pinned)
        b.data = data::pin_memory(b.data, *st.cfg.pool);
    } catch (const std::exception& e) {
      b.error = "DataLoader failed to collate batch " + std::to_string(seq) + " from " +
                source_name(st, w) + " (sample indices " + indices_str(indices_of(st, seq)) +
                "): " + e.what();
    }
  }
  deliver(st, seq, std::move(b.data), std::move(b.error));
  pump(st);
}

void sampler::on_source_error(const caf::error& err, const caf::strong_actor_ptr& from) {
  // A source replied with an error instead of a loaded_batch: it broke the source_actor
  // contract (failures go in loaded_batch::error), so the run ends naming it.
  auto& st = *impl_;
  const int64_t w = slot_of(st, from);
  if (w < 0 || !st.active || st.failed)
    return;
  deliver(st, -1, {}, source_name(st, w) + " replied with an error: " + caf::to_string(err),
          true);
}

void sampler::on_timeout(uint64_t run_id, int64_t seq, int64_t clock) {
  collect(); // a batch on the shelf was loaded in time
  auto& st = *impl_;
  if (run_id != st.plan.run_id || !st.active || st.failed)
    return;
  auto it = st.outstanding.find(seq);
  if (it == st.outstanding.end() || it->second.clock != clock)
    return; // loaded in time, or its clock restarted since (re-issued, taken, displaced)
  std::ostringstream os;
  os << "DataLoader timed out after " << st.cfg.timeout_s << " seconds waiting for "
     << source_name(st, it->second.worker) << " to load batch " << seq << " (sample indices "
     << indices_str(indices_of(st, seq)) << ")";
  deliver(st, seq, {}, os.str(), true);
}

void sampler::on_down(const caf::down_msg& msg) {
  auto& st = *impl_;
  for (size_t w = 0; w < st.sources.size(); ++w) {
    if (msg.source != st.sources[w].address())
      continue;
    // See Note [Task stealing]: what others took of its tasks is theirs, the rest re-issued.
    if (steals(st))
      st.cfg.shelf->freeze(int64_t(w));
    collect(); // what the dead worker left on the shelf is not re-issued
    replace_source(st, int64_t(w), msg.reason);
    return;
  }
  collect();
}

caf::actor sampler::source(int64_t id) const {
  const auto& st = *impl_;
  if (id < 0 || size_t(id) >= st.sources.size())
    return nullptr;
  return caf::actor_cast<caf::actor>(st.sources[size_t(id)]);
}

namespace {

struct sampler_actor_state {
  std::unique_ptr<sampler> core;
};

caf::behavior sampler_actor(caf::stateful_actor<sampler_actor_state>* self, coordinator_config cfg) {
  self->state.core = std::make_unique<sampler>(self, std::move(cfg));
  self->set_down_handler([self](caf::down_msg& msg) { self->state.core->on_down(msg); });
  return {
      [self](epoch_atom, epoch_plan& plan) { self->state.core->start(std::move(plan)); },
      [self](credit_atom, uint64_t run_id) { self->state.core->credit(run_id); },
      [self](loaded_batch& b) { self->state.core->on_loaded(b, self->current_sender()); },
      [self](caf::error& err) { self->state.core->on_source_error(err, self->current_sender()); },
      [self](timeout_atom, uint64_t run_id, int64_t seq, int64_t clock) {
        self->state.core->on_timeout(run_id, seq, clock);
      },
      [self](worker_atom, int64_t id) -> caf::result<caf::actor> {
        caf::actor a = self->state.core->source(id);
        if (!a)
          return caf::make_error(caf::sec::invalid_argument);
        return a;
      },
  };
}

} // namespace

std::vector<uint64_t> resume_skip_seeds(uint64_t base_seed, int64_t epoch, int64_t k,
                                        int64_t streams, int64_t w) {
  std::vector<uint64_t> out;
  for (int64_t j = 0; j < k; ++j)
    out.push_back(data::batch_seed(base_seed, epoch, j * streams + w));
  return out;
}

caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg) {
  return sys.spawn<caf::detached>(sampler_actor, std::move(cfg));
}

} // namespace actorch::actors
