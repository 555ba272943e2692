// torch.distributed.optim.ZeroRedundancyOptimizer: the optimizer's state sharded across the
// replicas. Each replica owns a partition of the parameters (torch's: by size, largest first,
// each to the replica holding the fewest elements so far), keeps the optimizer state of its
// own only, steps them, and then every parameter's new value travels from its owner to the
// others. With the gradients averaged by DDP, the parameters come out bit-equal to the unsharded
// optimizer's step: the owner runs the same arithmetic, and the exchange adds exact zeros.
//
//   dist::zero_redundancy_optimizer opt(ddp.module().parameters(), [](std::vector<tensor> ps) {
//     return std::make_unique<optim::adam>(std::move(ps), optim::adam_options{.lr = 1e-3});
//   }, ddp.group_ptr());
//   ... loss.backward(); opt.step();
//   opt.consolidate_state_dict(0);          // every replica calls it
//   if (rank == 0) save(opt.state_dict());  // the unsharded optimizer's layout
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "comm/ddp/replica_group.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch::dist {

/// torch's optimizer_class and its defaults in one: builds the local optimizer over a shard.
using optimizer_factory =
    std::function<std::unique_ptr<optim::optimizer>(std::vector<tensor> shard)>;

class zero_redundancy_optimizer {
public:
  /// Every replica constructs it alike, over the same parameters in the same order.
  zero_redundancy_optimizer(std::vector<tensor> params, optimizer_factory make_optimizer,
                            std::shared_ptr<replica_group> group);

  /// The local optimizer's step over this replica's shard, then every parameter from its
  /// owner (one all-reduce per dtype; a collective: every replica calls it).
  void step();
  /// Clears (set_to_none) or zeroes every parameter's gradient, not only the shard's.
  void zero_grad(bool set_to_none = true);

  /// Parameter indices (into the constructor's list) per replica rank.
  const std::vector<std::vector<size_t>>& partition() const { return partition_; }
  optim::optimizer& local_optimizer() { return *local_; }

  /// Gathers every replica's optimizer state onto replica `to` (a collective).
  void consolidate_state_dict(int to = 0);
  /// The whole state in the unsharded optimizer's layout ("state.<index>.<name>" with the
  /// constructor's indices), which a plain optimizer of the same kind or a sharded one at any
  /// world size loads. Only on the replica that consolidate_state_dict gathered it to.
  const optim::optimizer_state& state_dict() const;
  /// Loads a whole state (from state_dict, or a plain optimizer's): this replica keeps its
  /// shard's entries. Checks everything before changing anything.
  void load_state_dict(const optim::optimizer_state& state);

private:
  std::vector<tensor> params_;
  std::shared_ptr<replica_group> group_;
  std::vector<std::vector<size_t>> partition_;
  std::vector<int> owner_;                    // parameter -> replica rank
  std::vector<std::vector<size_t>> by_dtype_; // the parameters of each dtype, the exchange's groups
  std::unique_ptr<optim::optimizer> local_;
  std::optional<optim::optimizer_state> consolidated_;
};

/// "state.<index>.<name>" -> (index, name); throws naming any other key.
std::pair<size_t, std::string> split_state_key(const std::string& key);
/// The unsharded layout from the shards' entries, keyed by the whole list's indices: entries sorted
/// by parameter and name, `metadata` (any shard's: the kind and hyper-parameters are the same) with
/// the whole parameter count `total`.
optim::optimizer_state whole_state(std::vector<std::pair<std::string, tensor>> entries,
                                   std::map<std::string, std::string> metadata, size_t total);
/// Every replica's optimizer state entries ("state.<index>.<name>") onto replica `to`, by rank
/// (contiguous copies; empty elsewhere). A collective: an all-gather of their schemas, then
/// each replica's tensors broadcast from it.
std::vector<std::vector<std::pair<std::string, tensor>>>
gather_state_entries(replica_group& group, const std::vector<std::pair<std::string, tensor>>& mine,
                     int to);
/// torch's _partition_parameters: parameters by size, largest first (stable), each to the
/// rank with the fewest elements so far (the lowest rank among equals).
std::vector<std::vector<size_t>> partition_parameters(const std::vector<tensor>& params, int world);

} // namespace actorch::dist
