// The hosts of a coordinator (host.hpp).
//
// Note [Loader host]
// ~~~~~~~~~~~~~~~~~~
// The coordinator is a state machine inside an actor that hosts it. Tasks go out as plain
// messages in the host's name; a source's reply (its handler's result) comes back to the host
// as an ordinary message, and so do down messages and deadlines. For the range-for the host
// is the consumer's own blocking actor, on the consumer's thread, as PyTorch's main process
// runs its sampler: a batch costs one wake-up (the worker's reply waking the consumer) and the
// credit is a function call. A detached coordinator between the workers and the consumer's
// queue would cost three wake-ups per batch (the reply, the delivery, the credit), each
// preempting a worker on two cores (docs/performance.md, "Loader host"). A consumer actor
// keeps a detached coordinator actor as host, since it can only talk by messages.
#include "actors/loader/host.hpp"

#include <algorithm>
#include <chrono>

#include "base/error.hpp"

namespace actorch::actors {

range_for_host::range_for_host(caf::actor_system& sys,
                               std::function<coordinator_config()> make_config)
    : self_(std::make_unique<caf::scoped_actor>(sys)), make_config_(std::move(make_config)) {}

range_for_host::~range_for_host() {
  core_.reset(); // asks the workers it spawned to exit, in the host's name
}

void range_for_host::start(epoch_plan plan) {
  if (!core_) {
    coordinator_config cfg = make_config_();
    timeout_s_ = cfg.timeout_s;
    interruption_point_ = cfg.interruption_point;
    core_ = std::make_unique<coordinator>(self_->ptr(), std::move(cfg));
  }
  run_id_ = plan.run_id;
  // A safety net behind the coordinator's own deadlines, should they never come (the longest:
  // a resumed stream's first task, Note [Iterable resume] in plan.cpp).
  const int64_t covers =
      1 + (plan.resumed.empty() ? 0 : *std::max_element(plan.resumed.begin(), plan.resumed.end()));
  stall_s_ = timeout_s_ > 0 ? timeout_s_ * double(covers) * 2 + 1 : 0;
  core_->start(std::move(plan));
}

delivery range_for_host::next() {
  for (;;) {
    auto& out = core_->deliveries();
    if (out.empty()) {
      core_->collect(); // See Note [Batch shelf] in batch_shelf.cpp
      if (out.empty())
        ACTORCH_CHECK(receive(), "DataLoader timed out after ", timeout_s_,
                      " seconds waiting for batch (no answer from the coordinator)");
      continue;
    }
    delivery d = std::move(out.front());
    out.pop_front();
    if (d.run_id != run_id_)
      continue; // left over from an abandoned run
    // Taken: its credit goes back now, as PyTorch counts a task outstanding until the main
    // process receives its batch (Note [Loader credits] in dispatcher.cpp).
    if (!d.end_of_epoch && (d.error.empty() || d.recoverable)) // the run goes on after it
      core_->credit(run_id_);
    return d;
  }
}

void range_for_host::finish() {
  if (core_)
    core_->finish();
}

bool range_for_host::receive() {
  auto& self = *self_;
  auto on_loaded = [&](loaded_batch& b) { core_->on_loaded(b, self->current_sender()); };
  auto on_error = [&](caf::error& e) { core_->on_source_error(e, self->current_sender()); };
  auto on_timeout = [&](timeout_atom, uint64_t r, int64_t seq, int64_t clock) {
    core_->on_timeout(r, seq, clock);
  };
  auto on_down = [&](caf::down_msg& m) { core_->on_down(m); };
  if (stall_s_ <= 0 && !interruption_point_) {
    self->receive(on_loaded, on_error, on_timeout, on_down);
    return true;
  }
  using namespace std::chrono;
  const auto stall = stall_s_ > 0
                         ? duration_cast<steady_clock::duration>(duration<double>(stall_s_))
                         : steady_clock::duration::max();
  const auto began = steady_clock::now();
  for (;;) {
    auto wait = stall - (steady_clock::now() - began);
    if (wait <= steady_clock::duration::zero())
      return false;
    if (interruption_point_)
      wait = std::min<steady_clock::duration>(wait, kInterruptSlice);
    bool idle = false;
    self->receive(
        on_loaded, on_error, on_timeout, on_down,
        caf::after(duration_cast<microseconds>(wait)) >> [&] { idle = true; });
    if (!idle)
      return true;
    if (interruption_point_)
      interruption_point_(); // may throw: the epoch ends, the exception reaches the loop
  }
}

namespace {

struct coordinator_actor_state {
  std::unique_ptr<coordinator> core;
};

caf::behavior coordinator_actor(caf::stateful_actor<coordinator_actor_state>* self,
                                coordinator_config cfg) {
  self->state.core = std::make_unique<coordinator>(self, std::move(cfg));
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

caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg) {
  return sys.spawn<caf::detached>(coordinator_actor, std::move(cfg));
}

} // namespace actorch::actors
