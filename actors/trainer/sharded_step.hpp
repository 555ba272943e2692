// The trainer actors of one process sharing one copy of the parameters and stepping a shard
// each (ZeroRedundancyOptimizer's idea without its exchanges): see Note [Sharded step] in
// sharded_step.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/nn/module.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch::actors {

/// What the replicas of one process share: their parameters, who steps which, the barriers.
class sharded_step {
public:
  explicit sharded_step(int num_local) : replicas_(size_t(num_local)) {}

  /// Replica i's part of the set-up, once its parameters equal every other replica's (after
  /// DDP's broadcast): they take replica 0's memory, and replica i gets the optimizer its spec
  /// makes over its shard, an equal share of the parameters' elements (pieces of them, as 1-D
  /// views). Blocks until every replica joined.
  std::unique_ptr<optim::optimizer>
  join(int i, nn::module& model,
       const std::function<std::unique_ptr<optim::optimizer>(nn::module&)>& make_optimizer);

  /// After replica i's backward: once every replica's is done, the average over the replicas
  /// of its shard's gradients (in replica order, divided once, as the in-place all-reduce
  /// computes it) into the .grad of its pieces, which its optimizer steps.
  void average_shard(int i);
  /// After a replica's step of its shard: waits until every shard is stepped (the next forward
  /// reads them all).
  void stepped();

  /// The whole optimizer state in the unsharded optimizer's layout. Called by one replica
  /// while every other one waits between stepped() and its next step (a checkpoint).
  optim::optimizer_state state_dict() const;
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
  void barrier();

  std::vector<replica> replicas_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr aborted_;
};

} // namespace actorch::actors
