// A process group: `size()` ranks that run collectives and point-to-point ops together
// (c10d's ProcessGroup). Ranks given to these methods are ranks *within the group*; the free
// functions of distributed.hpp take global ranks, as torch.distributed does, and translate.
// Every op returns a work (see work.hpp); ops of one group run in issue order on every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/work.hpp"
#include "core/tensor.hpp"

namespace actorch::dist {

/// torch.distributed.ReduceOp. AVG divides the sum by the group size (floating dtypes only);
/// BAND/BOR/BXOR take integer and bool tensors.
enum class reduce_op { sum, avg, product, min, max, band, bor, bxor };

/// "SUM", "AVG", ... as PyTorch prints them.
const char* reduce_op_name(reduce_op op);

/// Memory every rank of a group maps (process_group::empty_symmetric, after torch's
/// SymmetricMemory): the ranks order their reads and writes of it with its barrier.
class symmetric_memory {
public:
  virtual ~symmetric_memory() = default;
  /// Rank q's buffer, mapped here (the group's rank, not the global one).
  virtual tensor buffer(int q) const = 0;
  /// Waits until every rank has called it as often as this one, over signals in the memory
  /// itself: independent of the group's queued collectives (no thread hop), callable from any
  /// thread, one per rank at a time. Throws naming a rank whose process exited or that did not
  /// arrive within the group's timeout.
  virtual void barrier() = 0;
};

class process_group {
public:
  /// @pre 0 <= rank < size, or rank == -1 for a rank that is not a member (new_group).
  process_group(int rank, int size, std::vector<int> global_ranks);
  virtual ~process_group();
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;

  /// This process's rank in the group; -1 when it is not a member.
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The global rank of each group rank, in group-rank order.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  /// The group rank of a global rank, or -1 when it is not in the group.
  int group_rank(int global_rank) const;
  virtual std::string backend() const = 0;
  /// The device this group's tensors live on: the CPU for Gloo, the group's GPU for NCCL.
  virtual device collective_device() const { return kCPU; }

  /// Zeroed CPU memory for `numel` elements of `dt` that this group's all_reduce reduces in
  /// place without copying it in or out (after torch's symmetric memory; DDP's gradient
  /// buckets use it): a collective, called by every rank with the same arguments in the same
  /// order. An undefined tensor when the group has no such memory (its ranks are on several
  /// hosts, the tensor is too small to gain from it, or the backend has none): callers then
  /// use ordinary memory. Only an all_reduce of the whole tensor takes the copy-free path.
  virtual tensor empty_shared(int64_t numel, dtype dt);
  /// Zeroed CPU memory that every rank maps (torch's symmetric memory): each rank's buffer of
  /// `numel` elements of `dt`, which any rank may read and write, with a barrier of its own. A
  /// collective as empty_shared; null on every rank when the group has no such memory (its
  /// ranks are on several hosts, a buffer cannot be made, or the backend has none), at any size.
  virtual std::shared_ptr<symmetric_memory> empty_symmetric(int64_t numel, dtype dt);

  // Collectives. Each must be called by every rank of the group, in the same order.
  virtual work broadcast(tensor& t, int root) = 0;
  /// Reduces `t` in place on every rank; the work's result()[0] is `t`.
  virtual work all_reduce(tensor& t, reduce_op op) = 0;
  /// The result lands in `t` on `root`; other ranks' `t` is left as it was.
  virtual work reduce(tensor& t, int root, reduce_op op) = 0;
  /// outputs[i] receives rank i's input. @pre outputs.size() == size()
  virtual work all_gather(std::vector<tensor>& outputs, const tensor& input) = 0;
  /// output is size() inputs concatenated along dim 0 (or flat with size() x numel elements).
  virtual work all_gather_into_tensor(tensor& output, const tensor& input) = 0;
  /// On root, outputs[i] receives rank i's input; elsewhere `outputs` must be empty.
  virtual work gather(std::vector<tensor>& outputs, const tensor& input, int root) = 0;
  /// On root, inputs[i] goes to rank i's `output`; elsewhere `inputs` must be empty.
  virtual work scatter(tensor& output, const std::vector<tensor>& inputs, int root) = 0;
  /// output = reduction over ranks of their inputs[rank()]. @pre inputs.size() == size()
  virtual work reduce_scatter(tensor& output, const std::vector<tensor>& inputs, reduce_op op) = 0;
  /// outputs[i] receives rank i's inputs[rank()]. All tensors have one shape and dtype.
  virtual work all_to_all(std::vector<tensor>& outputs, const std::vector<tensor>& inputs) = 0;
  virtual work barrier() = 0;
  /// A barrier through the store that names the ranks which did not arrive within `timeout`,
  /// in torch's words first (Note [Monitored barrier]): the first missing rank, or with
  /// `wait_all_ranks` every one, as torch's gloo names them.
  virtual work monitored_barrier(std::chrono::milliseconds timeout, bool wait_all_ranks) = 0;

  // Point-to-point. They do not wait for the group's collectives (c10d's behaviour).
  virtual work send(const tensor& t, int dst, int tag) = 0;
  /// src == -1: from any rank; the work's source_rank() says which.
  virtual work recv(tensor& t, int src, int tag) = 0;

  /// Breaks this group's connections, so that peers waiting on this process fail at once
  /// rather than at their timeout, and every later op of the group fails: an elastic job's
  /// survivors leave a group that lost a rank this way (Note [Elastic membership]). Nothing to
  /// break by default.
  virtual void abort() {}

protected:
  /// "all_reduce: ..." checks shared by the back-ends; name the op in every message.
  void check_rank(const char* op, int r, const char* what) const;

  int rank_;
  int size_;
  std::vector<int> global_ranks_;
};

} // namespace actorch::dist
