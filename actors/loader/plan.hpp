// The plan of a run: which batches, with which indices and seeds. The one place an index_batch
// is made (make_task), for the workers, a user's source and the inline source alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "core/data/batch_sampler.hpp"

namespace actorch::actors {

/// Task `seq` of `plan` (indices empty for an iterable run); `skip_seeds`: see Note [Iterable
/// resume].
index_batch make_task(const epoch_plan& plan, int64_t seq, std::vector<int64_t> indices,
                      bool auto_collation, std::vector<uint64_t> skip_seeds = {});

/// The (seq, indices) of `epoch`'s batches from `batches`, less those `delivered` before (a
/// resumed run). Throws naming the batch for a delivered index that the epoch does not have or
/// a sample index outside [0, dataset_size).
std::vector<std::pair<int64_t, std::vector<int64_t>>>
plan_batches(data::batch_sampler& batches, int64_t epoch, const std::vector<int64_t>& delivered,
             int64_t dataset_size);

/// Iterable: per stream, how many of its batches `delivered` holds (Note [Iterable resume]);
/// throws naming the stream unless they are each stream's first.
std::vector<int64_t> resumed_per_stream(const std::vector<int64_t>& delivered, int64_t streams);

/// The seeds of batches 0..k-1 of stream `w` of `streams` (an iterable dataset's worker), which
/// its first task of a run resumed at its batch k passes over (Note [Iterable resume]).
std::vector<uint64_t> resume_skip_seeds(uint64_t base_seed, int64_t epoch, int64_t k,
                                        int64_t streams, int64_t w);

/// A batch's sample indices for messages: "[3, 17, 42]", cut after 16 with ", ...".
std::string indices_str(const std::vector<int64_t>& indices);

} // namespace actorch::actors
