// This process's part of a data-parallel job's replica groups: the process group across
// processes, the comm actor over it and the local replicas that meet in it (or, for one GPU
// replica per process, the NCCL group itself). In an elastic job it also rebuilds them all
// without a lost rank (Note [Elastic healing] in process_link.cpp). This header includes no CAF.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/trainer.hpp"
#include "actors/trainer/sharded_step.hpp"
#include "comm/ddp/replica_group.hpp"
#include "comm/elastic.hpp"
#include "comm/process_group.hpp"

namespace caf {
class actor_system;
}

namespace actorch::actors {

class process_link {
public:
  /// `pg`: the group across processes (null: this process is the whole job). `devices`: where
  /// each local replica trains. `sys` must outlive this object.
  process_link(caf::actor_system& sys, std::shared_ptr<dist::process_group> pg, int num_local,
               std::vector<device> devices);
  ~process_link();

  /// Local replica `i`'s handle on the job's replica group.
  std::shared_ptr<dist::replica_group> replica(int i);
  int process_rank() const;
  int num_processes() const;
  /// The group across processes now (null for a job of one process).
  std::shared_ptr<dist::process_group> group() const;
  /// Fails the local replicas' pending and future exchanges (one replica failed).
  void abort(std::exception_ptr e);

  /// The local replicas' sharded step (Note [Sharded step]), or null where the job does not
  /// shard it: set once, before the trainers start.
  void set_sharded(std::shared_ptr<sharded_step> s) { sharded_ = std::move(s); }
  sharded_step* sharded() const { return sharded_.get(); }

  /// Whether this job heals: started by `actorch launch --elastic`, with a process group.
  bool elastic() const { return coordinator_ != nullptr; }
  /// The launcher's membership this process's group belongs to (0 until a rank is lost).
  int64_t membership() const { return generation_; }
  /// Whether this process replaces a lost rank: it joined a running job and takes its state
  /// from the others (Note [Elastic healing]).
  bool replacement() const { return replacement_; }
  /// Elastic only, from replica 0's thread after one of its collectives failed with `why`:
  /// leaves the broken group, waits for the launcher's next membership, joins the survivors'
  /// group and returns replica 0's new handle, with `info` updated (rank, world size). Throws
  /// when no membership comes (the failure was not a lost rank), carrying `why`.
  std::shared_ptr<dist::replica_group> regroup(replica_info& info, const std::string& why);

private:
  void connect(std::shared_ptr<dist::process_group> pg);
  void watch();

  caf::actor_system& sys_;
  int num_local_;
  std::vector<device> devices_;
  mutable std::mutex mu_; // the monitor's abort against replica 0's regroup
  std::shared_ptr<dist::process_group> pg_;
  std::shared_ptr<dist::process_exchange> exchange_;
  std::shared_ptr<dist::local_replicas> locals_;
  std::shared_ptr<dist::replica_group> gpu_group_;
  std::shared_ptr<sharded_step> sharded_;
  std::unique_ptr<dist::elastic::coordinator> coordinator_;
  int64_t generation_ = 0; // written under mu_ (with pg_), by replica 0's thread
  bool replacement_ = false;
  std::atomic<bool> stop_{false};
  std::thread watcher_;                      // elastic: breaks pg_ when a newer membership comes
  int process_rank_ = 0, num_processes_ = 1; // as the last group had them
};

} // namespace actorch::actors
