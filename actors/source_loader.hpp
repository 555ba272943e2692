// A data loader fed by a user's source actor instead of the dataset-worker pool: the coordinator
// sends it index batches (actors/interfaces.hpp, source_actor) and it replies with samples or
// batches. Everything else (samplers, credits, in_order, collate, pin_memory, timeout,
// save/resume) is the loader's, as with a dataset.
#pragma once

#include "actors/data_loader.hpp"
#include "actors/interfaces.hpp"

namespace actorch::data {

/// A loader over `dataset_size` indices served by `source`, running in `sys` (which must
/// outlive the loader). num_workers is ignored (the source decides its own parallelism); the
/// credits are prefetch_factor (2 when unset) x max(1, num_workers). The loader never kills the
/// source: it belongs to the caller.
data_loader make_source_loader(caf::actor_system& sys, actors::source_actor source,
                               int64_t dataset_size, loader_options opts = {});

} // namespace actorch::data
