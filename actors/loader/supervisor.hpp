// The supervisor: the sources of a loader, their deadlines and their deaths. It monitors each
// source, starts the deadline of the task a source begins (Note [Loader timeout]), replaces a
// dead worker (Note [Worker death]), and stops the workers the loader spawned when it goes.
// What to re-issue or report is the coordinator's call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/interfaces.hpp"
#include "actors/loader/dispatcher.hpp"

namespace actorch::actors {

class supervisor {
public:
  /// `respawn` makes the replacement of dead source `id`; empty for a user's sources (a dead
  /// one is then an error, and the supervisor never stops them). `iterable`: the sources are
  /// iterable-dataset workers the loader spawned: they stop with it but are not replaced.
  supervisor(caf::local_actor* host, std::vector<source_actor> sources,
             std::function<source_actor(int64_t id)> respawn, bool iterable, double timeout_s);
  ~supervisor(); // asks the workers the loader spawned to exit
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  size_t size() const { return sources_.size(); }
  const source_actor& source(int64_t w) const { return sources_[size_t(w)]; }
  /// The slot of the source that sent `from`, or -1.
  int64_t slot_of(const caf::strong_actor_ptr& from) const;
  /// The slot of the source a down message is about, or -1.
  int64_t slot_of(const caf::actor_addr& addr) const;
  /// "DataLoader worker 2", or "DataLoader source 0" for a user's.
  std::string name(int64_t w) const;
  /// Whether the sources are the loader's own workers, which the supervisor replaces.
  bool replaces() const { return bool(respawn_); }
  bool own_workers() const { return bool(respawn_) || iterable_; }

  /// With a timeout, starts the deadline of batch `seq` of run `run_id`, which its source
  /// begins now: a (timeout_atom, run_id, seq, clock) message to the host.
  void start_clock(uint64_t run_id, int64_t seq, outstanding_task& task);
  /// A new worker in slot `w` (the old one killed if it still runs). @pre replaces()
  void replace(int64_t w);

private:
  caf::local_actor* host_;
  std::vector<source_actor> sources_;
  std::function<source_actor(int64_t)> respawn_;
  bool iterable_;
  double timeout_s_;
  int64_t clocks_ = 0; // deadlines started, to number them
};

} // namespace actorch::actors
