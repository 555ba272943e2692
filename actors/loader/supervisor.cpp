// The supervisor (supervisor.hpp).
//
// Note [Loader timeout]
// ~~~~~~~~~~~~~~~~~~~~~
// PyTorch's `timeout` bounds the main process's wait for a batch. Here a deadline bounds a
// source's work on one task. A source takes its tasks in the order they were sent (or a taken
// one first: Note [Task stealing] in task_board.cpp), so only the first of its queue runs a
// clock (start_clock): from its send, when the source had nothing else, or from when the task
// before it came back. (A batch left on the shelf is seen at the next collect, so the next
// clock starts late rather than early; a user's source that answers out of order only gets
// more time.) Counting every task from its send would time out a healthy worker whose batches
// take more than timeout / prefetch_factor: the task queued behind the one in progress would
// wait for it on its own clock. Clocks are numbered, and a deadline whose number is no longer
// its task's is dropped (coordinator::on_timeout): its task came back, was re-issued, or
// changed hands.
//
// Note [Worker death]
// ~~~~~~~~~~~~~~~~~~~
// The supervisor monitors the workers rather than linking to them: CAF makes an exit_msg with
// exit_reason::kill fatal to a linked actor whatever its exit handler, so a killed worker
// would take the coordinator (and the epoch) down with it. A worker that dies (an exception
// not derived from std::exception, a kill) sends its down message (its tasks still queued are
// dropped with it); that replaces the worker (replace: a new actor in the same slot, same id)
// and the coordinator re-issues the batches it held with attempt + 1. A reply is taken only
// from the source that holds its batch now, of the current run (run_id); so are timeouts of
// the current attempt; the down message of a worker replaced already is dropped. After
// max_attempts loads of one batch, the death is an error, delivered in order as a dataset's
// exception is (after every batch before it). An iterable worker is not replaced: its stream
// cannot be resumed, so its death is an error. The workers the loader spawned do not outlive
// the supervisor: its destructor (the coordinator's, when the loader ends the run or the
// coordinator actor stops) asks them to exit.
#include "actors/loader/supervisor.hpp"

#include <chrono>

namespace actorch::actors {

supervisor::supervisor(caf::local_actor* host, std::vector<source_actor> sources,
                       std::function<source_actor(int64_t)> respawn, bool iterable,
                       double timeout_s)
    : host_(host), sources_(std::move(sources)), respawn_(std::move(respawn)), iterable_(iterable),
      timeout_s_(timeout_s) {
  // See Note [Worker death]. An exit from the loader stops a coordinator actor (CAF's default).
  for (auto& s : sources_)
    host_->monitor(s);
}

supervisor::~supervisor() {
  if (own_workers())
    for (auto& s : sources_)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
}

int64_t supervisor::slot_of(const caf::strong_actor_ptr& from) const {
  return slot_of(caf::actor_cast<caf::actor_addr>(from));
}

int64_t supervisor::slot_of(const caf::actor_addr& addr) const {
  for (size_t w = 0; w < sources_.size(); ++w)
    if (addr && addr == sources_[w].address())
      return int64_t(w);
  return -1;
}

std::string supervisor::name(int64_t w) const {
  return (own_workers() ? "DataLoader worker " : "DataLoader source ") + std::to_string(w);
}

void supervisor::start_clock(uint64_t run_id, int64_t seq, outstanding_task& task) {
  if (timeout_s_ <= 0)
    return;
  task.clock = ++clocks_;
  auto& clock = host_->home_system().clock();
  clock.schedule_message(
      clock.now() + std::chrono::microseconds(int64_t(timeout_s_ * double(task.covers) * 1e6)),
      caf::strong_actor_ptr{host_->ctrl()},
      caf::make_mailbox_element(nullptr, caf::make_message_id(), caf::no_stages,
                                timeout_atom::value, run_id, seq, task.clock));
}

void supervisor::replace(int64_t w) {
  // The old one is dead already (or about to be: kill it).
  host_->demonitor(sources_[size_t(w)].address());
  caf::anon_send_exit(sources_[size_t(w)], caf::exit_reason::kill);
  sources_[size_t(w)] = respawn_(w);
  host_->monitor(sources_[size_t(w)]);
}

} // namespace actorch::actors
