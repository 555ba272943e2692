// Device memory on CUDA GPUs: the process-wide caching allocator over cudaMalloc/cudaFree, and
// torch.cuda's memory functions over its statistics. Built where actorch has CUDA; elsewhere
// every function but cuda_device_count() throws, saying so.
#pragma once

#include <cstddef>
#include <string>

#include "core/allocator.hpp"
#include "core/caching_allocator.hpp"

namespace actorch {

/// Throws actorch::error: `who` needs CUDA and this build of actorch has none.
[[noreturn]] void fail_without_cuda(const char* who);

/// Number of CUDA devices the runtime sees: 0 without CUDA support, a driver or a GPU.
int cuda_device_count();
/// Why cuda_device_count() is 0 ("actorch was built without CUDA", the runtime's error), or
/// empty when there is a device.
std::string cuda_unavailable_reason();
/// What keeps CUDA device `device` from being used, empty when nothing does: "no CUDA device
/// is available (<reason>)" or "device N is not a CUDA device of this machine (it has M)".
/// Every check of a device the user names goes through it, each adding what it was for.
std::string cuda_device_problem(int device);

/// The process-wide caching allocator of CUDA device memory (see Note [Caching allocator]).
/// @pre cuda_device_count() > 0, else throws actorch::error.
caching_allocator& cuda_caching_allocator();

/// `device`'s memory through cuda_caching_allocator(), for the stream current when allocating:
/// the allocator of CUDA tensors' storage.
/// @pre 0 <= device < cuda_device_count(), else throws actorch::error.
allocator* cuda_allocator(int device);

/// torch.cuda.memory_allocated: bytes in blocks handed out on `device`.
size_t cuda_memory_allocated(int device = 0);
/// torch.cuda.memory_reserved: bytes in segments the caching allocator holds on `device`.
size_t cuda_memory_reserved(int device = 0);
/// torch.cuda.max_memory_allocated: peak of cuda_memory_allocated since the last reset.
size_t cuda_max_memory_allocated(int device = 0);
/// torch.cuda.max_memory_reserved.
size_t cuda_max_memory_reserved(int device = 0);
/// torch.cuda.reset_peak_memory_stats.
void cuda_reset_peak_memory_stats(int device = 0);
/// torch.cuda.empty_cache: returns every unused cached segment, on all devices, to the driver.
void cuda_empty_cache();

} // namespace actorch
