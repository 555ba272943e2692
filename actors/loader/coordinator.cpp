// The coordinator (coordinator.hpp): the stages of a run joined.
#include "actors/loader/coordinator.hpp"

#include <sstream>
#include <utility>

#include "actors/loader/dispatcher.hpp"
#include "actors/loader/plan.hpp"
#include "actors/loader/reorder_buffer.hpp"
#include "actors/loader/supervisor.hpp"
#include "actors/loader/worker.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

namespace {

/// A worker's exit reason for a message: the text it carries (a worker process's death says how
/// it ended), else CAF's rendering.
std::string reason_text(const caf::error& reason) {
  const caf::message& context = reason.context();
  if (context.size() >= 1 && context.match_element<std::string>(0))
    return context.get_as<std::string>(0);
  return caf::to_string(reason);
}

/// How deliver() takes a batch.
struct delivery_kind {
  bool urgent = false; // delivered now, out of order: an error that ends the run
  bool skip = false;   // nothing to deliver: an iterable worker's end_of_data
  bool own = false;    // the error is the batch's own (delivery::recoverable)
};

} // namespace

struct coordinator::impl {
  impl(caf::local_actor* host, coordinator_config c)
      : self(host), cfg(std::move(c)),
        sup(host, std::move(cfg.sources), std::move(cfg.respawn), cfg.iterable, cfg.timeout_s) {}

  caf::local_actor* self; // the host: see Note [Loader host] in host.cpp
  coordinator_config cfg;
  supervisor sup;
  dispatcher disp;
  reorder_buffer reorder;
  epoch_plan plan;
  bool active = false;
  bool failed = false;
  size_t delivered = 0;
  std::vector<task_board::taken> takes; // scratch for apply_takes
  std::vector<delivery> ready;          // scratch for deliver
  std::deque<delivery> out;             // deliveries for the host's own consumer (no sink)

  /// The dataset indices of batch `seq` (none for an iterable run), for messages and tasks.
  const std::vector<int64_t>& indices_of(int64_t seq) const {
    static const std::vector<int64_t> none;
    return plan.iterable ? none : plan.batches[reorder.position(seq)].second;
  }

  /// Whether the sources are the loader's own map-style workers, which take tasks from each
  /// other's queues (Note [Task stealing] in task_board.cpp).
  bool steals() const { return cfg.board && sup.replaces() && !plan.iterable; }

  /// The run whose batches the shelf may keep (0: none) and the batch the consumer waits for.
  uint64_t shelf_run_id() const {
    const bool open = active && !failed && cfg.in_order && !plan.iterable && !plan.sink;
    return open ? plan.run_id : 0;
  }
  int64_t wanted_seq() const {
    return reorder.next() < plan.batches.size() ? plan.batches[reorder.next()].first : -1;
  }

  bool run_complete() const {
    if (!plan.iterable)
      return delivered == plan.batches.size();
    return disp.streams_done() && reorder.empty();
  }

  void push(delivery d) {
    if (!d.error.empty() && !d.recoverable)
      failed = true; // the run ends with the first error the consumer sees but a batch's own
    if (trace::enabled()) {
      const auto now = trace::clock::now();
      trace::record("coordinator", "deliver batch " + std::to_string(d.seq), now, now,
                    "\"batch\": " + std::to_string(d.seq));
    }
    if (plan.sink)
      caf::unsafe_send_as(self, plan.sink, batch_atom::value, std::move(d));
    else
      out.push_back(std::move(d));
  }

  /// Delivers batch `seq` (or its error; or nothing, for an iterable worker's end_of_data), in
  /// order unless urgent or !in_order; then ends the run if it is complete. After a batch's own
  /// error the range-for consumer's map-style run goes on; any other error ends the run.
  void deliver(int64_t seq, data::sample data, std::string error, delivery_kind how = {}) {
    const bool urgent = how.urgent, skip = how.skip, own = how.own;
    if (trace::enabled() && !skip) {
      const auto now = trace::clock::now();
      trace::record("coordinator", "batch " + std::to_string(seq) + " loaded", now, now,
                    "\"batch\": " + std::to_string(seq));
    }
    delivery d;
    d.run_id = plan.run_id;
    d.seq = seq;
    d.data = std::move(data);
    d.error = std::move(error);
    d.recoverable = own && !d.error.empty() && !plan.iterable && !plan.sink;
    if (!cfg.in_order || urgent) {
      if (!skip) {
        push(std::move(d));
        ++delivered;
      }
    } else {
      ready.clear();
      reorder.add(
          seq, std::move(d), skip,
          [this](size_t pos) { return plan.iterable && disp.passed_over(pos); }, ready);
      for (auto& r : ready) {
        if (failed)
          break; // the run ended with an error the consumer has; what follows it is dropped
        push(std::move(r));
        ++delivered;
      }
    }
    if (!failed && active && run_complete()) {
      delivery end;
      end.run_id = plan.run_id;
      end.end_of_epoch = true;
      push(std::move(end));
      active = false;
    }
  }

  /// Sends batch `seq` to source `w` (the one place a task goes out); `skip_seeds`: see
  /// Note [Iterable resume] in plan.cpp.
  void send(int64_t seq, int64_t w, int attempt, std::vector<uint64_t> skip_seeds = {}) {
    const int64_t covers = 1 + int64_t(skip_seeds.size());
    index_batch task =
        make_task(plan, seq, indices_of(seq), cfg.auto_collation, std::move(skip_seeds));
    const bool begins = disp.sent(seq, w, attempt, covers);
    if (steals())
      cfg.board->post(task, w, attempt);
    // The reply comes back to the host as an ordinary message (Note [Loader host]).
    caf::unsafe_send_as(self, sup.source(w), load_atom::value, std::move(task));
    if (begins)
      sup.start_clock(plan.run_id, seq, *disp.find(seq));
  }

  /// Batch `seq` came back (or was dropped) from source `w`: the next of its queue, if any,
  /// is the one it works on now (Note [Loader timeout] in supervisor.cpp).
  void retire(int64_t w, int64_t seq) {
    const int64_t next = disp.retire(w, seq);
    if (next >= 0)
      sup.start_clock(plan.run_id, next, *disp.find(next));
  }

  /// See Note [Task stealing]: the tasks workers took from others' queues since the last call
  /// change hands here. A taker had nothing left, so it works on the task now: first in its
  /// queue, clock started (late, when the taking is learnt: never early), and the head it
  /// displaces (sent to it after it took) waits without a deadline until the taken one comes
  /// back.
  void apply_takes() {
    if (!steals())
      return;
    cfg.board->takes_since(takes);
    for (const auto& t : takes) {
      const auto old_owner_begins = disp.take(t);
      if (!old_owner_begins)
        continue;
      if (*old_owner_begins >= 0)
        sup.start_clock(plan.run_id, *old_owner_begins, *disp.find(*old_owner_begins));
      sup.start_clock(plan.run_id, t.seq, *disp.find(t.seq));
    }
  }

  void pump() {
    while (active && !failed) {
      auto p = disp.next(plan);
      if (!p)
        return;
      if (plan.iterable)
        reorder.place(p->seq, size_t(p->seq));
      send(p->seq, p->worker, 0, std::move(p->skip_seeds));
    }
  }

  /// Source `w` died (`reason`): replace it and re-issue what it held (Note [Worker death] in
  /// supervisor.cpp), or end the run naming it.
  void on_death(int64_t w, const caf::error& reason) {
    if (!sup.replaces()) {
      if (active && !failed)
        deliver(-1, {},
                sup.name(w) +
                    (cfg.iterable ? " died while iterating the IterableDataset (a stream "
                                    "cannot be resumed): "
                                  : " stopped: ") +
                    reason_text(reason),
                {.urgent = true});
      return;
    }
    sup.replace(w);
    const std::deque<int64_t> lost = disp.drop_queue(w);
    if (!active || failed)
      return;
    // A worker process past its deadline without retry_timeouts: that batch fails (in order,
    // as a dataset's exception), the others it held are re-issued.
    int64_t timed_out = -1;
    if (reason == caf::sec::request_timeout && reason.context().size() == 2 &&
        reason.context().match_element<int64_t>(1))
      timed_out = reason.context().get_as<int64_t>(1);
    for (const int64_t seq : lost) { // in the order they were sent
      if (seq == timed_out) {
        disp.erase(seq); // (its child is killed: nothing is stuck, unlike a thread's timeout)
        deliver(seq, {}, reason_text(reason));
        if (failed)
          return;
        continue;
      }
      const int attempt = disp.find(seq)->attempt + 1;
      if (attempt < cfg.max_attempts) {
        send(seq, w, attempt);
        continue;
      }
      // In order, as a dataset's exception is: the consumer first gets every batch before this
      // one (the others lost here are re-issued, since one of them may come before it).
      disp.erase(seq);
      deliver(seq, {},
              sup.name(w) + " died " + std::to_string(attempt) + " times while loading batch " +
                  std::to_string(seq) + " (sample indices " + indices_str(indices_of(seq)) +
                  "); last exit reason: " + reason_text(reason));
      if (failed)
        return;
    }
  }
};

coordinator::coordinator(caf::local_actor* host, coordinator_config cfg)
    : impl_(std::make_unique<impl>(host, std::move(cfg))) {}

coordinator::~coordinator() = default;

std::deque<delivery>& coordinator::deliveries() {
  return impl_->out;
}

void coordinator::start(epoch_plan plan) {
  auto& st = *impl_;
  st.plan = std::move(plan);
  st.active = true;
  st.failed = false;
  st.delivered = 0;
  st.disp.start(st.plan, st.sup.size(), st.cfg.round_robin);
  st.reorder.start(st.plan);
  collect(); // drops what the last run left on the shelf, and opens it for this run
  if (!st.plan.iterable && st.plan.batches.empty()) {
    delivery end;
    end.run_id = st.plan.run_id;
    end.end_of_epoch = true;
    st.push(std::move(end));
    st.active = false;
    return;
  }
  st.pump();
}

void coordinator::credit(uint64_t run_id) {
  auto& st = *impl_;
  if (run_id != st.plan.run_id)
    return;
  st.disp.return_credit();
  collect(); // so that pump sees the sources' true load
  st.pump();
}

void coordinator::collect() {
  auto& st = *impl_;
  if (!st.cfg.shelf) {
    st.apply_takes();
    return;
  }
  // See Note [Batch shelf]: delivering what it held moves the wanted batch on, so again.
  for (;;) {
    // Takes first: a batch on the shelf may be a taken one. One taken after this is caught by
    // on_loaded, which looks again.
    st.apply_takes();
    auto items = st.cfg.shelf->wait_for(st.shelf_run_id(), st.wanted_seq());
    if (items.empty())
      return;
    for (auto& item : items)
      on_loaded(item.batch, item.from);
  }
}

void coordinator::finish() {
  if (impl_->cfg.shelf)
    impl_->cfg.shelf->wait_for(0, -1);
  if (impl_->cfg.board)
    impl_->cfg.board->drop_posts();
}

void coordinator::on_loaded(loaded_batch& b, const caf::strong_actor_ptr& from) {
  auto& st = *impl_;
  if (b.run_id != st.plan.run_id || !st.active || st.failed)
    return;
  const int64_t seq = b.seq;
  const int64_t w = st.sup.slot_of(from);
  outstanding_task* task = st.disp.find(seq);
  if (task && task->worker != w) {
    st.apply_takes(); // it may have been taken (Note [Task stealing])
    task = st.disp.find(seq);
  }
  if (!task || task->worker != w)
    return; // a reply of an older attempt (Note [Worker death]), or a duplicate
  st.disp.erase(seq);
  st.retire(w, seq);
  if (b.end_of_data && b.error.empty()) {
    // See Note [Iterable runs]: no batch, and its credit comes straight back.
    st.disp.end_stream(w, seq);
    st.disp.return_credit();
    st.deliver(seq, {}, {}, {.skip = true});
    st.pump();
    return;
  }
  if (b.error.empty()) // See Note [Loader stages] in worker.cpp: a user's source's batch
    finish_batch(b, st.cfg.auto_collation, st.cfg.recipe, [&] {
      return "DataLoader failed to collate batch " + std::to_string(seq) + " from " +
             st.sup.name(w) + " (sample indices " + indices_str(st.indices_of(seq)) + "): ";
    });
  st.deliver(seq, std::move(b.data), std::move(b.error), {.own = true});
  st.pump();
}

void coordinator::on_source_error(const caf::error& err, const caf::strong_actor_ptr& from) {
  // A source replied with an error instead of a loaded_batch: it broke the source_actor
  // contract (failures go in loaded_batch::error), so the run ends naming it.
  auto& st = *impl_;
  const int64_t w = st.sup.slot_of(from);
  if (w < 0 || !st.active || st.failed)
    return;
  st.deliver(-1, {}, st.sup.name(w) + " replied with an error: " + caf::to_string(err),
             {.urgent = true});
}

void coordinator::on_timeout(uint64_t run_id, int64_t seq, int64_t clock) {
  collect(); // a batch on the shelf was loaded in time
  auto& st = *impl_;
  if (run_id != st.plan.run_id || !st.active || st.failed)
    return;
  const outstanding_task* task = st.disp.find(seq);
  if (!task || task->clock != clock)
    return; // loaded in time, or its clock restarted since (re-issued, taken, displaced)
  if (st.cfg.deadline_passed)
    st.cfg.deadline_passed->store(true);
  std::ostringstream os;
  os << "DataLoader timed out after " << st.cfg.timeout_s << " seconds waiting for "
     << st.sup.name(task->worker) << " to load batch " << seq << " (sample indices "
     << indices_str(st.indices_of(seq)) << ")";
  st.deliver(seq, {}, os.str(), {.urgent = true});
}

void coordinator::on_down(const caf::down_msg& msg) {
  auto& st = *impl_;
  const int64_t w = st.sup.slot_of(msg.source);
  if (w < 0) {
    collect();
    return;
  }
  // See Note [Task stealing]: what others took of its tasks is theirs, the rest re-issued.
  if (st.steals())
    st.cfg.board->freeze(w);
  collect(); // what the dead worker left on the shelf is not re-issued
  st.on_death(w, msg.reason);
}

caf::actor coordinator::source(int64_t id) const {
  const auto& st = *impl_;
  if (id < 0 || size_t(id) >= st.sup.size())
    return nullptr;
  return caf::actor_cast<caf::actor>(st.sup.source(id));
}

} // namespace actorch::actors
