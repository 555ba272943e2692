// torch.nn.SyncBatchNorm: BatchNorm whose training statistics cover every replica's batch, as a
// module of its own and by converting a model's BatchNorm layers (convert_sync_batchnorm), so
// that a data-parallel run matches BatchNorm over the union of the batches.
#pragma once

#include <memory>
#include <optional>

#include "comm/ddp/replica_group.hpp"
#include "core/nn/layers.hpp"

namespace actorch::nn {

/// SyncBatchNorm(num_features, eps, momentum, affine, track_running_stats, process_group):
/// inputs of any rank from 2 up, (N, C, *). A null `process_group` means the default group's
/// world (dist::world()), looked up at the first training forward, as torch's None is; a
/// world of one replica normalises as BatchNorm does. In evaluation it uses its running
/// statistics, without communication.
class sync_batch_norm : public batch_norm_base {
public:
  explicit sync_batch_norm(int64_t num_features, double eps = 1e-5,
                           std::optional<double> momentum = 0.1, bool affine = true,
                           bool track_running_stats = true,
                           std::shared_ptr<dist::replica_group> process_group = nullptr);
  tensor forward(const tensor& input) override;
  /// Refused: its statistics belong to its process group (torch's DataParallel refuses it too).
  std::shared_ptr<module> clone() const override;

private:
  std::shared_ptr<dist::replica_group> group_;
};

} // namespace actorch::nn

namespace actorch::dist {

/// Makes every BatchNorm (1d, 2d, 3d) in `root`'s tree (root included) a SyncBatchNorm over
/// `replicas` (the default group's world when null), in place: unlike torch, which builds new
/// modules, the layers keep their identity, parameters and buffers, so optimizers and DDP made
/// before still hold them. Returns how many it converted. Every replica converts the same
/// model and runs the same training-mode forwards.
int convert_sync_batchnorm(nn::module& root, std::shared_ptr<replica_group> replicas = nullptr);

} // namespace actorch::dist
