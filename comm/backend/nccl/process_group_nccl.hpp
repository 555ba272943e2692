// The NCCL process group for CUDA tensors, behind the same process_group interface. It exists
// in CUDA builds (process_group_nccl.cpp); elsewhere process_group_nccl_stub.cpp builds in its
// place and says why it cannot run.
#pragma once

#include <memory>
#include <vector>

#include "comm/process_group.hpp"
#include "comm/store/store.hpp"

namespace actorch::dist {

/// Rendezvous of `size` ranks through `store` (rank 0 publishes the NCCL unique id) and an NCCL
/// communicator on CUDA device `device`; -1 picks, as PyTorch does when it must guess,
/// LOCAL_RANK (set by the launchers) or else `rank`, modulo the devices present. `timeout`
/// bounds the rendezvous and each op: an op not done that long after the previous one is
/// failed and the communicator aborted. Works have CUDA stream semantics (work::on_stream).
/// Throws actorch::error when the build has no CUDA or no GPU is usable, naming the CUDA
/// error.
std::shared_ptr<process_group> make_process_group_nccl(std::shared_ptr<store> store, int rank,
                                                       int size, milliseconds timeout,
                                                       std::vector<int> global_ranks = {},
                                                       int device = -1);

} // namespace actorch::dist
