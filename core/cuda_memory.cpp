// The caching allocator's CUDA backend (cudaMalloc/cudaFree on the right device) and
// torch.cuda's memory functions. Without CUDA the same functions build and throw, saying why.
#include "core/cuda_memory.hpp"

#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/cuda/stream.hpp"
#include "kernels/cuda/context.hpp"

#if ACTORCH_HAVE_CUDA
#include "kernels/cuda/check.hpp"
#endif

namespace actorch {

#if ACTORCH_HAVE_CUDA

namespace {

// cuda::device_guard for the allocator's noexcept paths: a failed switch leaves the device as
// it was instead of throwing.
class quiet_device_guard {
public:
  explicit quiet_device_guard(int device)
      : switched_(cudaGetDevice(&previous_) == cudaSuccess && previous_ != device &&
                  cudaSetDevice(device) == cudaSuccess) {}
  ~quiet_device_guard() {
    if (switched_)
      (void)cudaSetDevice(previous_);
  }
  quiet_device_guard(const quiet_device_guard&) = delete;
  quiet_device_guard& operator=(const quiet_device_guard&) = delete;

private:
  int previous_ = 0;
  bool switched_;
};

class cuda_backend final : public caching_allocator_backend {
public:
  void* raw_alloc(size_t nbytes, int device) override {
    cuda::device_guard guard(device);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      // Not sticky: clear it so that the next call's cudaGetLastError does not see it.
      (void)cudaGetLastError();
      return nullptr;
    }
    ACTORCH_CHECK(err == cudaSuccess, "cuda memory: cudaMalloc of ", nbytes, " bytes on device ",
                  device, " failed: ", cudaGetErrorString(err));
    return p;
  }

  void raw_free(void* ptr, int device) noexcept override {
    // cudaFree waits for the device's work, so no stream can still be using the segment. A
    // failure here (a driver torn down at exit) leaves nothing to recover.
    quiet_device_guard on(device);
    (void)cudaFree(ptr);
  }

  std::string_view name() const override { return "CUDA"; }

  void* record_event(int device, std::uintptr_t stream) noexcept override {
    quiet_device_guard on(device);
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)) != cudaSuccess) {
      (void)cudaEventDestroy(e);
      e = nullptr;
    }
    if (e == nullptr)
      (void)cudaGetLastError();
    return e;
  }
  bool event_completed(void* event) override {
    return kernels::cuda::query_done(cudaEventQuery(static_cast<cudaEvent_t>(event)),
                                     "cuda memory: cudaEventQuery");
  }
  bool synchronize_event(void* event) noexcept override {
    if (cudaEventSynchronize(static_cast<cudaEvent_t>(event)) == cudaSuccess)
      return true;
    (void)cudaGetLastError();
    return false;
  }
  void destroy_event(void* event) noexcept override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  std::string describe_memory(int device) override {
    size_t free_bytes = 0, total_bytes = 0;
    try {
      cuda::device_guard guard(device);
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return {};
      }
    } catch (const error&) {
      return {};
    }
    return "GPU " + std::to_string(device) + " has a total capacity of " +
           format_memory_size(total_bytes) + " of which " + format_memory_size(free_bytes) +
           " is free.";
  }
};

// Storage memory of one device, cached per stream: a block serves the stream that was current
// when it was allocated, and returns to that stream's pool (PyTorch's rule; a tensor used on
// another stream must not be freed before that stream is done with it).
class cuda_device_allocator final : public allocator {
public:
  cuda_device_allocator(int device, caching_allocator& cache) : device_(device), cache_(cache) {}
  void* allocate(size_t nbytes) override {
    return cache_.allocate(nbytes, device_,
                           reinterpret_cast<stream_id>(kernels::cuda::current_stream(device_)));
  }
  void deallocate(void* ptr, size_t) noexcept override {
    // Only fails for a pointer that did not come from allocate(): a bug that terminates.
    cache_.deallocate(ptr);
  }
  actorch::device device() const override { return {device_type::cuda, device_}; }
  std::string_view name() const override { return "cuda"; }

private:
  int device_;
  caching_allocator& cache_; // the device was checked when this was made
};

struct device_count_result {
  int count = 0;
  std::string why_none; // the runtime's reason when count is 0
};

const device_count_result& device_count() {
  static const device_count_result result = [] {
    device_count_result r;
    // cudaGetDeviceCount leaves its argument untouched on error: check the code, not the count.
    const cudaError_t err = cudaGetDeviceCount(&r.count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      r.count = 0;
      r.why_none = cudaGetErrorString(err);
    } else if (r.count == 0) {
      r.why_none = "the CUDA runtime sees no device";
    }
    return r;
  }();
  return result;
}

void check_device(const char* who, int device) {
  const std::string problem = cuda_device_problem(device);
  ACTORCH_CHECK(problem.empty(), who, ": ", problem);
}

} // namespace

int cuda_device_count() {
  return device_count().count;
}

std::string cuda_unavailable_reason() {
  return device_count().why_none;
}

caching_allocator& cuda_caching_allocator() {
  check_device("cuda_caching_allocator", 0);
  // Leaked on purpose, as PyTorch does: tensors destroyed during static destruction may still
  // free into it, and the CUDA runtime may be gone by the time a destructor would run.
  static cuda_backend* backend = new cuda_backend();
  static caching_allocator* instance = new caching_allocator(backend);
  return *instance;
}

allocator* cuda_allocator(int device) {
  check_device("cuda_allocator", device);
  static const std::vector<cuda_device_allocator*> allocators = [] {
    std::vector<cuda_device_allocator*> v;
    for (int d = 0; d < device_count().count; ++d)
      v.push_back(new cuda_device_allocator(d, cuda_caching_allocator())); // leaked with it
    return v;
  }();
  return allocators[static_cast<size_t>(device)];
}

size_t cuda_memory_allocated(int device) {
  check_device("cuda_memory_allocated", device);
  return cuda_caching_allocator().stats(device).allocated_bytes;
}

size_t cuda_memory_reserved(int device) {
  check_device("cuda_memory_reserved", device);
  return cuda_caching_allocator().stats(device).reserved_bytes;
}

size_t cuda_max_memory_allocated(int device) {
  check_device("cuda_max_memory_allocated", device);
  return cuda_caching_allocator().stats(device).peak_allocated_bytes;
}

size_t cuda_max_memory_reserved(int device) {
  check_device("cuda_max_memory_reserved", device);
  return cuda_caching_allocator().stats(device).peak_reserved_bytes;
}

void cuda_reset_peak_memory_stats(int device) {
  check_device("cuda_reset_peak_memory_stats", device);
  cuda_caching_allocator().reset_peak_stats(device);
}

void cuda_empty_cache() {
  // As torch.cuda.empty_cache: nothing to do where CUDA never started.
  if (cuda_device_count() > 0)
    cuda_caching_allocator().empty_cache();
}

#else // !ACTORCH_HAVE_CUDA

int cuda_device_count() {
  return 0;
}
std::string cuda_unavailable_reason() {
  return "actorch was built without CUDA";
}
caching_allocator& cuda_caching_allocator() {
  fail_without_cuda("cuda_caching_allocator");
}
allocator* cuda_allocator(int) {
  fail_without_cuda("cuda_allocator");
}
size_t cuda_memory_allocated(int) {
  fail_without_cuda("cuda_memory_allocated");
}
size_t cuda_memory_reserved(int) {
  fail_without_cuda("cuda_memory_reserved");
}
size_t cuda_max_memory_allocated(int) {
  fail_without_cuda("cuda_max_memory_allocated");
}
size_t cuda_max_memory_reserved(int) {
  fail_without_cuda("cuda_max_memory_reserved");
}
void cuda_reset_peak_memory_stats(int) {
  fail_without_cuda("cuda_reset_peak_memory_stats");
}
void cuda_empty_cache() {}

#endif

std::string cuda_device_problem(int device) {
  const int count = cuda_device_count();
  if (count == 0)
    return "no CUDA device is available (" + cuda_unavailable_reason() + ")";
  if (device < 0 || device >= count)
    return detail::concat("device ", device, " is not a CUDA device of this machine (it has ",
                          count, ")");
  return {};
}

void fail_without_cuda(const char* who) {
  ACTORCH_FAIL(who, ": actorch was built without CUDA (nvcc was not found when configuring, or "
                    "ACTORCH_ENABLE_CUDA is OFF)");
}

} // namespace actorch
