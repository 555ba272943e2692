// The CPU allocator, and the pinned allocator's fallback when no CUDA driver can lock pages.
#include "core/allocator.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <pthread.h>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"

#if ACTORCH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/context.hpp"
#endif

namespace actorch {

namespace {

// nullptr when the memory cannot be had.
void* try_aligned_allocate(size_t nbytes, std::string_view who) {
  // aligned_alloc wants a size that is a multiple of the alignment, and 0 may give nullptr.
  const size_t rounded = round_up_bytes(nbytes, kAlignment, who);
  return std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
}

void* aligned_allocate(size_t nbytes, std::string_view who) {
  void* p = try_aligned_allocate(nbytes, who);
  ACTORCH_CHECK(p != nullptr, who, ": out of memory allocating ", nbytes, " bytes");
  return p;
}

// Note [Large CPU blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A training step frees and allocates the same few-MiB tensors (activations, gradients) step
// after step. glibc gives such blocks back to the kernel between steps: blocks above its
// mmap threshold are unmapped on free, the main heap's top is trimmed, and a thread's arena
// heap (64 MiB) that becomes empty is unmapped whole. Each step then faults the pages in
// again, zero-filled one at a time: measured on the ddp-mlp step, 950 page faults per step
// (25% of its time) on one thread, and 4,800 per step in each process of a 2-process job of
// width 2048, whose trainer thread's arena emptied every step once its gradient buckets had
// moved to shared memory. So the CPU allocator keeps freed blocks of 128 KiB or more, by size
// (rounded up to whole pages), up to a limit (ACTORCH_CPU_CACHE_MB, 1024 by default; 0
// turns it off), and hands them out again for the same size, as the CUDA caching allocator
// does for device memory. cpu_empty_cache() gives them back. The lock is taken around fork
// so that a forked loader worker finds it free.
class cpu_allocator_impl final : public allocator {
public:
  static constexpr size_t kLarge = 128u << 10;
  static constexpr size_t kPage = 4096;

  cpu_allocator_impl() {
    limit_ = size_t(env_int("ACTORCH_CPU_CACHE_MB", 1024, 0, int64_t(1) << 30)) << 20; // MiB
  }

  void* allocate(size_t nbytes) override {
    const size_t size = nbytes < kLarge ? nbytes : round_up_bytes(nbytes, kPage, "cpu allocator");
    if (size >= kLarge) {
      std::lock_guard lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    if (void* p = try_aligned_allocate(size, "cpu allocator"))
      return p;
    // The held blocks may be what is missing: free them and ask once more, as the CUDA
    // caching allocator does with its segments.
    empty();
    return aligned_allocate(size, "cpu allocator");
  }

  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (nbytes >= kLarge) {
      const size_t key = (nbytes + kPage - 1) / kPage * kPage; // allocate checked the size
      std::lock_guard lock(mu_);
      if (cached_ + key <= limit_) {
        try {
          free_[key].push_back(ptr);
          cached_ += key;
          return;
        } catch (...) { // no memory for the list: free the block instead
        }
      }
    }
    std::free(ptr);
  }

  actorch::device device() const override { return kCPU; }
  std::string_view name() const override { return "cpu"; }

  size_t cached() {
    std::lock_guard lock(mu_);
    return cached_;
  }
  void set_limit(size_t bytes) {
    std::lock_guard lock(mu_);
    limit_ = bytes;
    trim_locked(limit_);
  }
  size_t limit() {
    std::lock_guard lock(mu_);
    return limit_;
  }
  void empty() {
    std::lock_guard lock(mu_);
    trim_locked(0);
  }

  std::mutex mu_; // public for the fork handlers

private:
  // Frees held blocks until at most `keep` bytes are held.
  void trim_locked(size_t keep) {
    for (auto it = free_.begin(); it != free_.end() && cached_ > keep;) {
      while (!it->second.empty() && cached_ > keep) {
        std::free(it->second.back());
        it->second.pop_back();
        cached_ -= it->first;
      }
      it = it->second.empty() ? free_.erase(it) : std::next(it);
    }
  }

  std::unordered_map<size_t, std::vector<void*>> free_; // by rounded size
  size_t cached_ = 0;
  size_t limit_ = 0;
};

cpu_allocator_impl& the_cpu_allocator() {
  // Never destroyed: tensors of static lifetime may free into it during exit, and the cached
  // blocks stay reachable from here (not leaks).
  static cpu_allocator_impl* a = [] {
    auto* impl = new cpu_allocator_impl;
    ::pthread_atfork([] { the_cpu_allocator().mu_.lock(); },
                     [] { the_cpu_allocator().mu_.unlock(); },
                     [] { the_cpu_allocator().mu_.unlock(); });
    return impl;
  }();
  return *a;
}

#if ACTORCH_HAVE_CUDA
bool cuda_driver_present() {
  // cudaGetDeviceCount leaves its argument untouched on error: check the code, not the count.
  static const bool present = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return present;
}
#else
bool cuda_driver_present() {
  return false;
}
#endif

class pinned_allocator_impl final : public allocator {
public:
  void* allocate(size_t nbytes) override {
#if ACTORCH_HAVE_CUDA
    if (cuda_driver_present()) {
      kernels::cuda::adopt_home_device(); // no context on GPU 0 for a process on another GPU
      void* p = nullptr;
      const cudaError_t err = cudaHostAlloc(&p, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault);
      ACTORCH_CHECK(err == cudaSuccess, "pinned allocator: cudaHostAlloc of ", nbytes,
                    " bytes failed: ", cudaGetErrorString(err));
      return p;
    }
#endif
    return aligned_allocate(nbytes, "pinned allocator");
  }
  void deallocate(void* ptr, size_t) noexcept override {
#if ACTORCH_HAVE_CUDA
    if (cuda_driver_present()) {
      cudaFreeHost(ptr);
      return;
    }
#endif
    std::free(ptr);
  }
  actorch::device device() const override {
    return kCPU;
  }
  std::string_view name() const override {
    return "pinned";
  }
};

} // namespace

size_t round_up_bytes(size_t nbytes, size_t multiple, std::string_view who) {
  const size_t rounded = (nbytes + multiple - 1) / multiple * multiple;
  ACTORCH_CHECK(rounded >= nbytes, who, ": cannot allocate ", nbytes, " bytes (size overflow)");
  return rounded;
}

allocator* cpu_allocator() {
  return &the_cpu_allocator();
}

size_t cpu_cached_bytes() {
  return the_cpu_allocator().cached();
}

void cpu_empty_cache() {
  the_cpu_allocator().empty();
}

void set_cpu_cache_limit(size_t bytes) {
  the_cpu_allocator().set_limit(bytes);
}

size_t cpu_cache_limit() {
  return the_cpu_allocator().limit();
}

allocator* pinned_allocator() {
  static pinned_allocator_impl a;
  return &a;
}

bool pinned_memory_is_page_locked() {
  return cuda_driver_present();
}

} // namespace actorch
