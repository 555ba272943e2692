// The CPU allocator, and the pinned allocator's fallback when no CUDA driver can lock pages.
#include "core/allocator.hpp"

#include <cstdlib>
#include <new>
#include <string_view>

#include <malloc.h>

#include "base/error.hpp"

#if ACTORCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace actorch {

namespace {

void* aligned_allocate(size_t nbytes, std::string_view who) {
  // aligned_alloc wants a size that is a multiple of the alignment, and 0 may give nullptr.
  const size_t rounded = round_up_bytes(nbytes, kAlignment, who);
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  ACTORCH_CHECK(p != nullptr, who, ": out of memory allocating ", nbytes, " bytes");
  return p;
}

// Note [Large CPU blocks]
// A training step frees and allocates the same few-MiB tensors (activations, gradients) again
// and again. With glibc's defaults, blocks above the dynamic mmap threshold are mmapped fresh
// each time, and the main heap's top is trimmed once 2x that threshold is free: either way
// the pages go back to the kernel and the next step faults them in again, a zero-filled page
// at a time. Measured on the ddp-mlp step on one thread: 950 page faults per step, 25% of
// its time. So, on the first CPU allocation, actorch keeps blocks up to 32 MiB in the heap
// (M_MMAP_THRESHOLD) and lets up to 256 MiB of free heap top stay mapped (M_TRIM_THRESHOLD),
// as a caching allocator would. Not when the environment sets glibc's malloc tunables
// itself (GLIBC_TUNABLES) or ACTORCH_MALLOC_TUNING=0.
bool tune_malloc() {
#ifdef __GLIBC__
  const char* opt = std::getenv("ACTORCH_MALLOC_TUNING");
  if (opt != nullptr && std::string_view(opt) == "0")
    return false;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr &&
      std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos)
    return false;
  return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
#else
  return false;
#endif
}

class cpu_allocator_impl final : public allocator {
public:
  void* allocate(size_t nbytes) override {
    static const bool tuned [[maybe_unused]] = tune_malloc();
    return aligned_allocate(nbytes, "cpu allocator");
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
  actorch::device device() const override { return kCPU; }
  std::string_view name() const override { return "cpu"; }
};

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
  static cpu_allocator_impl a;
  return &a;
}

allocator* pinned_allocator() {
  static pinned_allocator_impl a;
  return &a;
}

bool pinned_memory_is_page_locked() {
  return cuda_driver_present();
}

} // namespace actorch
