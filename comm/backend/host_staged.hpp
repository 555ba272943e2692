// CUDA tensors over a CPU group through host copies, for ranks that share one GPU (NCCL refuses
// them). See Note [Ranks sharing a GPU] in host_staged.cpp.
#pragma once

#include <memory>

#include "comm/process_group.hpp"
#include "comm/store/store.hpp"

namespace actorch::dist {

/// Whether two of the `size` ranks use one GPU: each rank publishes the UUID of its CUDA device
/// `device` under "gpu/<rank>" in `store` and reads every other rank's. A collective: every
/// rank calls it once, with the same store, on its own device; all get the same answer.
bool ranks_share_a_gpu(store& store, int rank, int size, int device);

/// A group of `host`'s ranks for CUDA tensors on `device`, each op run by `host` (a CPU group:
/// Gloo) over host copies: the inputs are copied to host memory when the op is issued, after
/// what the device's current stream holds, and once `host`'s op is done its outputs are copied
/// back before the work completes (on the thread that completes `host`'s work). Works have no
/// stream semantics: wait() blocks the host until the outputs are on the GPU. The group holds
/// `host`.
std::shared_ptr<process_group> make_host_staged_group(std::shared_ptr<process_group> host,
                                                      int device);

} // namespace actorch::dist
