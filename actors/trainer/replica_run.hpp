// One replica's run of train_data_parallel, on its trainer actor's thread: the epoch loop
// (replica_run.cpp) and, in an elastic job, healing (healing.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/data_loader.hpp"
#include "actors/trainer.hpp"
#include "actors/trainer/process_link.hpp"
#include "actors/trainer_messages.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "core/cuda/timeline.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch::actors {

// One replica's whole run, on its trainer actor's thread.
class replica_run {
public:
  replica_run(const trainer_spec& spec, replica_info info, process_link& link,
              caf::event_based_actor* self, caf::actor monitor)
      : spec_(spec), info_(info), link_(link), group_(link.replica(info.local_rank)), self_(self),
        monitor_(std::move(monitor)), lane_("trainer " + std::to_string(info.rank)),
        device_(group_->collective_device()) {} // where train_data_parallel placed it

  replica_report run();

private:
  bool limit_reached() const { return spec_.max_steps >= 0 && total_ >= spec_.max_steps; }

  void wrap_model();
  // Note [Sharded step]
  // ~~~~~~~~~~~~~~~~~~~
  // Where the job shards the step and this model and optimizer allow it,
  // joins the other replicas over one copy of the parameters; opt_ becomes the shard's.
  void shard_optimizer();

  // Runs `f`, a part of the job with collectives; in an elastic job a failure of one of them
  // heals the job (Note [Elastic healing]) and returns false, for the caller to take up its
  // part again from where the survivors stand.
  template <class F> bool healing(F&& f) {
    if (!link_.elastic()) {
      f();
      return true;
    }
    try {
      f();
      return true;
    } catch (const std::exception& e) {
      heal(e.what());
      return false;
    }
  }

  // Steps 2 and 3 of Note [Elastic healing]: the survivors' group, then the furthest state.
  void heal(const std::string& why);

  // A replacement's optimizer makes its state (SGD's momentum, Adam's moments) with a step
  // over zero gradients, so that it has the entries the survivors broadcast into; the step's
  // changes are overwritten with the rest.
  void prime_optimizer();

  // Every member of the new group, survivors and replacements, in the same collectives: the
  // most steps done (then the latest epoch) and the lowest rank that did them, whose position
  // (`done_here` its epoch order positions), parameters, buffers and optimizer state everyone
  // takes, checked equal; then DDP over the new group.
  void sync_state(int64_t done_here);

  // The loader over the job's DistributedSampler (rank of world_size), and a loader over
  // `sampler` with the spec's options (the device prefetch's included).
  void make_loader();
  void new_loader(data::sampler_ptr sampler, std::shared_ptr<generator> gen);

  // This rank's share of epoch `epoch`'s order from `offset` on (Note [Elastic data
  // position]); start_segment also makes the epoch's loader over it (elastic jobs, and
  // Note [Resuming at another world size]). Without one the share is the DistributedSampler's.
  void plan_segment(int64_t epoch, int64_t offset);
  void start_segment(int64_t epoch, int64_t offset);

  // The epoch order's positions the completed steps covered.
  int64_t consumed() const;

  // This replica's batch of the segment's step `k`, as dataset indices.
  std::vector<int64_t> batch_indices(int64_t k) const;

  int64_t steps_per_epoch() const;

  void run_epoch(int64_t epoch, int64_t first_step, replica_report& report);

  // Rank 0 writes the checkpoint, then every replica waits for it (a barrier through the
  // replica group), so a resume never sees a half-written file.
  void save(int64_t epoch, int64_t step);

  const trainer_spec& spec_;
  replica_info info_;
  process_link& link_;
  std::shared_ptr<dist::replica_group> group_;
  caf::event_based_actor* self_;
  caf::actor monitor_;
  std::string lane_;
  device device_; // where this replica trains
  std::shared_ptr<nn::module> model_;
  std::unique_ptr<optim::optimizer> opt_; // null for a sharded step's empty shard
  sharded_step* sharded_ = nullptr;       // the link's, once shard_optimizer joined it
  std::unique_ptr<dist::distributed_data_parallel> ddp_;
  std::unique_ptr<data::data_loader> loader_;
  // On a GPU while tracing: each step as its stream ran it, next to the loader's copies.
  std::optional<cuda::stream_timeline> gpu_steps_;
  int64_t total_ = 0;
  int64_t epoch_ = 0;      // the epoch under way
  int64_t epoch_step_ = 0; // steps of this epoch done, counted from 0
  // This segment of the epoch's order (Note [Elastic data position]: from segment_offset_ on,
  // divided among the current members), this rank's share of it, the steps done over it, and
  // where an elastic job's survivors take up the epoch after healing.
  int64_t order_size_ = 0, segment_offset_ = 0, segment_steps_ = 0, resume_at_ = 0;
  std::vector<int64_t> shard_;
  bool segment_loader_ = false; // loader_ is over shard_, not the DistributedSampler
};

} // namespace actorch::actors
