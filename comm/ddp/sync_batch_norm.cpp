// SyncBatchNorm and convert_sync_batchnorm (sync_batch_norm.hpp).
#include "comm/ddp/sync_batch_norm.hpp"

#include "comm/collective_tag.hpp"
#include "comm/distributed.hpp"

namespace actorch::dist {
namespace {

std::shared_ptr<replica_group> world_replicas(const char* who) {
  ACTORCH_CHECK(is_initialized(), who,
                ": no process_group was given and the default group is not initialised; call "
                "dist::init_process_group first or pass a group");
  return process_replicas(world());
}

/// The sum over every replica of `group`, as functional::sync_batch_norm asks for it.
std::function<tensor(const tensor&)> all_reduce_sum_over(std::shared_ptr<replica_group> replicas) {
  return [replicas = std::move(replicas)](const tensor& t) {
    collective_tag tag("SyncBatchNorm");
    work w = replicas->all_reduce(t, reduce_op::sum);
    w.wait();
    return w.result().at(0); // t itself, reduced in place
  };
}

} // namespace

int convert_sync_batchnorm(nn::module& root, std::shared_ptr<replica_group> replicas) {
  if (!replicas)
    replicas = world_replicas("convert_sync_batchnorm");
  int converted = 0;
  if (auto* bn = dynamic_cast<nn::batch_norm_base*>(&root)) {
    bn->sync_statistics(all_reduce_sum_over(replicas));
    ++converted;
  }
  for (const auto& child : root.children())
    converted += convert_sync_batchnorm(*child, replicas);
  return converted;
}

} // namespace actorch::dist

namespace actorch::nn {

sync_batch_norm::sync_batch_norm(int64_t num_features, double eps, std::optional<double> momentum,
                                 bool affine, bool track_running_stats,
                                 std::shared_ptr<dist::replica_group> process_group)
    : batch_norm_base("SyncBatchNorm", {}, num_features, eps, momentum, affine,
                      track_running_stats),
      group_(std::move(process_group)) {}

std::shared_ptr<module> sync_batch_norm::clone() const {
  ACTORCH_FAIL("SyncBatchNorm cannot be cloned or replicated: its statistics come from its "
               "process group (use DistributedDataParallel, as torch says)");
}

tensor sync_batch_norm::forward(const tensor& input) {
  if (!synchronised() && (is_training() || !running_mean.defined())) {
    if (!group_)
      group_ = dist::world_replicas("SyncBatchNorm");
    if (group_->size() > 1) // one replica: BatchNorm's own statistics are the job's
      sync_statistics(dist::all_reduce_sum_over(group_));
  }
  return batch_norm_base::forward(input);
}

} // namespace actorch::nn
