// Trainer actors sharing one copy of the parameters and stepping a shard each
// (ZeroRedundancyOptimizer's idea without its exchanges): the actors of one process, or one
// actor per process of processes on one host through memory they all map. See Note [Sharded
// step] and Note [Sharded step across processes] in sharded_step.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/ddp/replica_group.hpp"
#include "comm/process_group.hpp"
#include "core/nn/module.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch::actors {

/// What the replicas share (the actors of one process, or one actor per process on one host):
/// their parameters, who steps which, the barriers.
class sharded_step : public std::enable_shared_from_this<sharded_step> {
public:
  /// The `num_local` trainer actors of a job of one process.
  explicit sharded_step(int num_local) : replicas_(size_t(num_local)) {}
  /// One trainer actor in each of `group`'s processes (Note [Sharded step across processes]).
  explicit sharded_step(std::shared_ptr<dist::process_group> group)
      : replicas_(1), group_(std::move(group)) {}
  /// Across processes, takes back what join() set on the parameters: backward makes their
  /// gradients in .grad again and no longer publishes them, so a model that outlives the job
  /// (its make_model kept it) trains or evaluates on its own.
  ~sharded_step();
  sharded_step(const sharded_step&) = delete;
  sharded_step& operator=(const sharded_step&) = delete;

  /// Replica i's part of the set-up, once its parameters equal every other replica's (after
  /// DDP's broadcast): they take replica 0's memory, and replica i gets the optimizer its spec
  /// makes over its shard, an equal share of the parameters' elements (pieces of them, as 1-D
  /// views). Blocks until every replica joined. Across processes, where the group has no
  /// memory every process maps or the parameters are not of one dtype, nothing changes and
  /// active() is false afterwards, alike in every process.
  std::unique_ptr<optim::optimizer>
  join(int i, nn::module& model,
       const std::function<std::unique_ptr<optim::optimizer>(nn::module&)>& make_optimizer);
  /// False after a join that could not shard the step.
  bool active() const { return active_; }
  /// Whether the replicas are processes: state_dict() is then a collective.
  bool across_processes() const { return group_ != nullptr; }

  /// After replica i's backward: once every replica's is done, the average over the replicas
  /// of its shard's gradients (in replica order, divided once, as the in-place all-reduce
  /// computes it) into the .grad of its pieces, which its optimizer steps.
  void average_shard(int i);
  /// After a replica's step of its shard: waits until every shard is stepped (the next forward
  /// reads them all).
  void stepped();

  /// The whole optimizer state in the unsharded optimizer's layout. In one process: called by
  /// one replica while every other one waits between stepped() and its next step (a
  /// checkpoint). Across processes: a collective over `group` (the replicas' group), the
  /// whole state on its rank 0 and an empty one elsewhere.
  optim::optimizer_state state_dict(dist::replica_group* group = nullptr) const;
  /// Replica i's shard of a whole state (a checkpoint's, or a plain optimizer's).
  void load_state_dict(int i, const optim::optimizer_state& whole);

  /// Fails the barriers of every replica with `e`: a replica that died does not leave the
  /// others waiting.
  void abort(std::exception_ptr e);

private:
  // A run of parameter `param`'s elements from `offset`, as a 1-D leaf over the shared memory
  // that the shard's optimizer steps.
  struct piece {
    size_t param;
    int64_t offset, length;
    tensor view;
  };
  struct replica {
    std::vector<tensor> params;
    std::vector<piece> shard;
    optim::optimizer* opt = nullptr; // null when the shard is empty
  };
  // Across processes: the memory every process maps, by process rank.
  struct mapped {
    tensor params;             // rank 0's buffer: the one copy of the parameters
    std::vector<tensor> grads; // rank q's gradients (the others read those outside its run)
    std::vector<tensor> used;  // int32 per parameter: rank q has a gradient for it this step
    std::shared_ptr<dist::symmetric_memory> signals; // the grads', whose barrier the step uses
    std::vector<int64_t> offsets;                  // parameter k's first element in the flat layout
    std::vector<std::pair<int64_t, int64_t>> kept; // parameter k's elements in this rank's run
  };
  // The pieces of run r of n over `params`.
  static std::vector<piece> pieces_of(const std::vector<tensor>& params, int r, int n);
  bool map_parameters(replica& me);
  void average_across_processes(replica& me);
  // Parameter k's part of this process's gradient block, shaped as `param`.
  tensor gradient_slot(size_t k, const tensor& param) const;
  // Backward's hook across processes: parameter k's gradient, outside this process's run, into
  // its buffer, and the parameter marked used.
  void publish_gradient(size_t k, const tensor& grad);
  // Averages `parts` (by replica, undefined: it did not use the parameter) into the piece's
  // gradient (parts[own], this replica's, where it has one), or clears it where no replica
  // used it.
  static void average_piece(piece& pc, const tensor& param, std::vector<tensor>& parts, size_t own);
  void barrier();

  std::vector<replica> replicas_;
  std::shared_ptr<dist::process_group> group_; // across processes
  mapped mapped_;
  bool active_ = true;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr aborted_;
};

} // namespace actorch::actors
