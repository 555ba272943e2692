// The hosts of a coordinator (Note [Loader host] in host.cpp): the range-for's own blocking
// actor, which runs it on the consumer's thread, and a detached coordinator actor for a
// consumer actor.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "actors/loader/coordinator.hpp"
#include "actors/loader/feed.hpp"

namespace actorch::actors {

/// How often the range-for's host, waiting for a batch, calls its interruption point: a Ctrl-C
/// reaches the loop within this (PyTorch's loader polls its queue every 5 s).
inline constexpr std::chrono::milliseconds kInterruptSlice{100};

/// The range-for's host: a blocking actor driven by the consumer's thread. It lives as long as
/// the loader; the coordinator (and the workers it spawns) lives from a run's start until
/// stop().
class range_for_host final : public batch_feed {
public:
  /// `make_config` spawns the workers and describes them, at the first run after stop().
  range_for_host(caf::actor_system& sys, std::function<coordinator_config()> make_config);
  ~range_for_host() override;

  void start(epoch_plan plan) override;
  /// Hands what arrives in the host's mailbox to the coordinator (replies, deaths, deadlines)
  /// until a delivery of the run is out; a batch's credit goes back as it is taken.
  delivery next() override;
  void finish() override;

  /// Stops the coordinator and the workers it spawned; the next start() makes new ones.
  void stop() { core_.reset(); }
  /// The running coordinator, or null.
  coordinator* core() { return core_.get(); }

private:
  /// One message from the mailbox to the coordinator; false after the stall timeout.
  bool receive();

  std::unique_ptr<caf::scoped_actor> self_;
  std::function<coordinator_config()> make_config_;
  std::unique_ptr<coordinator> core_;
  uint64_t run_id_ = 0;
  double timeout_s_ = 0;
  double stall_s_ = 0;                       // > 0: next() throws after this long without a message
  std::function<void()> interruption_point_; // coordinator_config::interruption_point
};

/// Spawns a coordinator actor, for a consumer actor (detached: finishing a user's source's
/// batches may be real work). Send it (epoch_atom, epoch_plan) to start a run and (credit_atom,
/// run_id) per batch the consumer is done with; anon_send_exit(it, user_shutdown) stops it and
/// the workers it spawned. (worker_atom, id) answers the source in slot `id` as a caf::actor
/// (tests only).
caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace actorch::actors
