#include "actors/trainer/process_link.hpp"

#include <chrono>
#include <cstdio>

#include "actors/comm_actor.hpp"
#include "base/error.hpp"

namespace actorch::actors {

// Note [Elastic healing]
// ~~~~~~~~~~~~~~~~~~~~~~
// Under `actorch launch --elastic` a rank killed by a signal does not end the job (Note
// [Elastic membership] in comm/launch/launcher.cpp). The survivors' next collective fails:
// the dead rank's sockets closed, or, for a rank waiting on a survivor that already left,
// that survivor's abort() closed them. Each survivor then, on its trainer's thread:
//  1. leaves the broken group (abort: peers still inside a collective with it fail now, not
//     at the timeout) and stops its comm actor, failing the buckets it held;
//  2. waits for the launcher's next membership and joins its group, a Gloo one without shared
//     memory (process_link::regroup); a second rank lost before all have joined makes the
//     rendezvous fail once the launcher publishes the membership after it (Note [Superseded
//     membership] in comm/elastic.cpp), and the survivors take that one;
//  3. agrees with the others on the furthest state: a step's all-reduce may have finished on
//     some survivors (the lost rank sent its part, then died) and not on others, so the
//     survivors take the most steps done, and the lowest rank that did them broadcasts its
//     parameters, buffers and optimizer state, then every survivor checks that its copy sums
//     as the others' (replica_run::sync_state in healing.cpp);
//  4. goes on from where that survivor's data stood: the epoch's order positions its completed
//     steps covered are done, the rest is divided among the survivors (Note [Elastic data
//     position] in core/data/sampler.cpp), so that the step in flight when the rank died is
//     done again, by the survivors, and no sample of the epoch is skipped or repeated
//     (padding aside).
// A replacement the launcher started (--max-restarts) is in that membership: its
// init_process_group joins the group, and its trainer, whose optimizer made its state with a
// zero-gradient step, takes part in step 3 as a member that has done no step, then starts at
// the broadcast epoch and position.
// One CPU replica per process: several trainer actors per process would each have to regroup
// their local_replicas at once, and NCCL groups cannot be aborted from here; both are refused.

process_link::process_link(caf::actor_system& sys, std::shared_ptr<dist::process_group> pg,
                           int num_local, std::vector<device> devices)
    : sys_(sys), num_local_(num_local), devices_(std::move(devices)) {
  if (pg && dist::elastic::enabled()) {
    coordinator_ = std::make_unique<dist::elastic::coordinator>(std::chrono::milliseconds(60000));
    generation_ = dist::elastic::joined_membership(); // a replacement's group is a later one
    replacement_ = generation_ > 0;
  }
  connect(std::move(pg));
  if (coordinator_)
    watcher_ = std::thread([this] { watch(); });
}

process_link::~process_link() {
  stop_ = true;
  if (watcher_.joinable())
    watcher_.join();
}

// A rank blocked in a collective with a peer behind a cut link gets no socket error (the
// packets just stop) until the group's timeout. So a thread of its own waits for the
// launcher's next membership and breaks the group when it comes; the collective fails then
// and the trainer regroups (Note [Elastic healing]). Its own store connection: the trainer's
// regrouping uses the coordinator's meanwhile.
void process_link::watch() {
  try {
    dist::elastic::coordinator c(std::chrono::milliseconds(60000));
    while (!stop_) {
      int64_t g;
      {
        std::lock_guard lock(mu_);
        g = generation_;
      }
      if (!c.published(g + 1, std::chrono::milliseconds(200)))
        continue;
      {
        std::lock_guard lock(mu_);
        if (generation_ == g && pg_) // not yet regrouped: this group is the broken one
          pg_->abort();
      }
      // Until the trainer has regrouped (or the job ends).
      for (;;) {
        {
          std::lock_guard lock(mu_);
          if (generation_ != g || stop_)
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (const std::exception&) {
    // The store is gone (the launcher ended or is cut off): the trainer's own calls say so.
  }
}

void process_link::connect(std::shared_ptr<dist::process_group> pg) {
  pg_ = std::move(pg);
  locals_.reset();
  gpu_group_.reset();
  exchange_ = spawn_comm_actor(sys_, pg_);
  process_rank_ = exchange_->process_rank();
  num_processes_ = exchange_->num_processes();
  // The replicas meet in local_replicas, whose comm actor crosses processes, on the CPU or on
  // GPUs (Note [Replicas on GPUs] in comm/ddp/replica_group.cpp). One GPU replica per process
  // instead goes straight to the job's NCCL group, whose collectives order themselves after
  // the trainer's stream (Note [NCCL stream order]) without the host waiting.
  if (devices_.front().is_cuda() && num_local_ == 1 && pg_)
    gpu_group_ = dist::process_replicas(pg_);
  else
    locals_ = std::make_shared<dist::local_replicas>(num_local_, exchange_, devices_);
}

std::shared_ptr<dist::replica_group> process_link::replica(int i) {
  std::lock_guard lock(mu_);
  return locals_ ? locals_->replica(i) : gpu_group_;
}

int process_link::process_rank() const {
  std::lock_guard lock(mu_);
  return process_rank_;
}

int process_link::num_processes() const {
  std::lock_guard lock(mu_);
  return num_processes_;
}

std::shared_ptr<dist::process_group> process_link::group() const {
  std::lock_guard lock(mu_);
  return pg_;
}

void process_link::abort(std::exception_ptr e) {
  std::lock_guard lock(mu_);
  if (sharded_)
    sharded_->abort(e);
  if (locals_)
    locals_->abort(std::move(e));
}

std::shared_ptr<dist::replica_group> process_link::regroup(replica_info& info,
                                                           const std::string& why) {
  ACTORCH_CHECK(elastic(), "process_link::regroup: not an elastic job");
  const auto began = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    pg_->abort();
    locals_.reset();
    exchange_.reset(); // the comm actor stops, failing what it still holds
  }
  for (int64_t after = generation_;;) {
    dist::elastic::membership m;
    try {
      m = coordinator_->next(after, std::chrono::seconds(30));
    } catch (const std::exception& e) {
      ACTORCH_FAIL(why, " (an elastic job, but no rank was lost: ", e.what(), ")");
    }
    after = m.generation;
    std::shared_ptr<dist::process_group> pg;
    try {
      pg = coordinator_->make_group(m);
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "train_data_parallel: membership %lld did not meet (%s); waiting for the "
                   "next\n",
                   static_cast<long long>(m.generation), e.what());
      continue;
    }
    const std::string ranks = dist::elastic::rank_list(m.ranks);
    {
      std::lock_guard lock(mu_);
      connect(std::move(pg));
      generation_ = m.generation;
    }
    info.process_rank = m.rank;
    info.num_processes = int(m.ranks.size());
    info.rank = m.rank * num_local_ + info.local_rank;
    info.world_size = num_local_ * info.num_processes;
    std::printf(
        "train_data_parallel: launch rank %d regrouped as rank %d of %d (membership "
        "%lld: ranks %s) %.0f ms after: %s\n",
        coordinator_->launch_rank(), m.rank, info.num_processes,
        static_cast<long long>(m.generation), ranks.c_str(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count(),
        why.c_str());
    std::fflush(stdout);
    return replica(info.local_rank);
  }
}

} // namespace actorch::actors
