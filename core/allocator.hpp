// Host memory for tensor storage. Two allocators share one interface: 64-byte-aligned CPU
// memory, and pinned (page-locked) host memory for fast, asynchronous copies to a GPU. The
// pipeline's buffer pools (actors/) allocate through this interface and reuse what they get.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/device.hpp"

namespace actorch {

/// Memory alignment of every allocation: one cache line, enough for any SIMD load.
inline constexpr size_t kAlignment = 64;

class allocator {
public:
  virtual ~allocator() = default;
  /// Returns `nbytes` of memory aligned to kAlignment (a unique non-null pointer for 0 bytes).
  /// Throws actorch::error naming the size when the memory cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  /// Gives back what allocate(nbytes) returned.
  virtual void deallocate(void* ptr, size_t nbytes) noexcept = 0;
  /// The device the memory belongs to (host memory is device "cpu").
  virtual actorch::device device() const = 0;
  virtual std::string_view name() const = 0;
};

/// `nbytes` rounded up to a multiple of `multiple`; throws actorch::error ("<who>: cannot
/// allocate N bytes (size overflow)") when that does not fit in a size_t.
size_t round_up_bytes(size_t nbytes, size_t multiple, std::string_view who);

/// The default allocator of CPU tensors. It keeps freed blocks of 128 KiB or more for reuse by
/// allocations of the same size, up to ACTORCH_CPU_CACHE_MB (1024 by default, 0: off); see
/// Note [Large CPU blocks] in allocator.cpp.
allocator* cpu_allocator();
/// Bytes the CPU allocator holds for reuse (torch.cuda.memory_reserved's idea, on the host).
size_t cpu_cached_bytes();
/// Frees every block the CPU allocator holds for reuse (torch.cuda.empty_cache's idea).
void cpu_empty_cache();
/// Changes how many bytes the CPU allocator may hold for reuse, freeing the excess now.
void set_cpu_cache_limit(size_t bytes);
/// How many bytes the CPU allocator may hold for reuse.
size_t cpu_cache_limit();

/// Page-locked host memory through cudaHostAlloc where actorch was built with CUDA and a driver
/// is present; plain aligned memory otherwise (pinned_memory_is_page_locked() tells which).
allocator* pinned_allocator();
bool pinned_memory_is_page_locked();

} // namespace actorch
