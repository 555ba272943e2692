// torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm of a model normalises with the
// statistics of all replicas' batches, reduced through the job's replica group, so that a
// data-parallel run matches BatchNorm over the union of the batches.
#pragma once

#include <memory>

#include "comm/ddp/replica_group.hpp"
#include "core/nn/module.hpp"

namespace actorch::dist {

/// Makes every batch_norm1d in `root`'s tree (root included) a SyncBatchNorm over `group`, in
/// place (the layers keep their identity, parameters and buffers), and returns how many it
/// converted. Every replica converts the same model and runs the same training-mode forwards.
int convert_sync_batchnorm(nn::module& root, std::shared_ptr<replica_group> group);

} // namespace actorch::dist
