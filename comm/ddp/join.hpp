// torch.distributed.algorithms.Join for DistributedDataParallel: training with uneven inputs.
// A replica that runs out of batches calls finish() (or leaves the scope) and then shadows the
// collectives of the replicas still training, iteration by iteration, with zero gradients, so
// that none of them hangs or fails; once every replica has joined, the model of the last to
// join (the one that trained longest) is copied to every replica, as torch's DDP join hook does.
//
//   {
//     dist::join j({&ddp});
//     for (const auto& batch : my_batches) {       // as many or as few as this replica has
//       opt.zero_grad();
//       loss_of(ddp(batch)).backward();
//       opt.step();
//     }
//   }  // j.finish(): shadows the others until all are done
//
// Gradients average over the initial world size (torch's divide_by_initial_world_size=True):
// a joined replica contributes zeros. Inside a join every forward of the DDP must be a training
// forward with gradients that a backward follows, without no_sync, as the joined replicas
// shadow exactly that.
#pragma once

#include <vector>

#include "comm/ddp/distributed_data_parallel.hpp"

namespace actorch::dist {

class join {
public:
  /// `joinables`: one DistributedDataParallel (torch's Join also takes a
  /// ZeroRedundancyOptimizer and joinables of the user's; actorch's takes DDP only).
  /// enable=false makes the context do nothing, as torch's. With throw_on_early_termination,
  /// every replica throws as soon as one has run out of inputs, instead of shadowing.
  explicit join(std::vector<distributed_data_parallel*> joinables, bool enable = true,
                bool throw_on_early_termination = false);
  /// finish() unless it ran or an exception is leaving the scope (the other replicas then fail
  /// on their next collective, naming this one, within the group's timeout).
  ~join();
  join(const join&) = delete;
  join& operator=(const join&) = delete;

  /// This replica has no more inputs: shadows the others until all have joined, then copies the
  /// last joiner's parameters and buffers everywhere. Once.
  void finish();

  /// Called by the DDP's forward while this context is open: counts this replica as training.
  /// @throws actorch::error, on every replica, with throw_on_early_termination once one joined.
  void notify_training();

private:
  distributed_data_parallel* ddp_ = nullptr;
  bool enabled_;
  bool throw_early_;
  bool finished_ = false;
  int64_t iterations_ = 0; // training forwards this replica ran inside the context
};

} // namespace actorch::dist
