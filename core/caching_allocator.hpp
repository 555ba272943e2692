// Device memory through a caching allocator: PyTorch's CUDACachingAllocator design over any
// backend that can hand out and take back raw segments (cudaMalloc/cudaFree in
// core/cuda_memory.cpp; a recording fake in the tests). Tensor storages on a GPU allocate through
// it so that a training step's thousands of short-lived tensors never reach cudaMalloc.
// See Note [Caching allocator] in caching_allocator.cpp for the rules and where they differ
// from PyTorch's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actorch {

/// Where raw segments come from. Calls are serialised by the caching allocator's mutex.
class caching_allocator_backend {
public:
  virtual ~caching_allocator_backend() = default;
  /// Returns `nbytes` of memory on `device`, or nullptr when the device is out of memory (the
  /// caching allocator then frees its cached segments and asks once more). Any other failure
  /// throws actorch::error.
  virtual void* raw_alloc(size_t nbytes, int device) = 0;
  /// Gives back what raw_alloc returned.
  virtual void raw_free(void* ptr, int device) noexcept = 0;
  /// What ran out in an out-of-memory message: "CUDA".
  virtual std::string_view name() const = 0;
  /// One sentence on the device's memory for the out-of-memory message ("GPU 0 has a total
  /// capacity of 79.19 GiB of which 12.00 MiB is free."), or empty when unknown.
  virtual std::string describe_memory(int /*device*/) { return {}; }

  // For record_stream (a cudaEvent_t in the CUDA backend):
  /// An event recorded now on `stream` of `device`: it completes once everything queued there
  /// so far has run. nullptr when the device fails: the block waiting for it then never
  /// returns to its pool (nothing says the stream is done with it).
  virtual void* record_event(int device, std::uintptr_t stream) noexcept = 0;
  /// Whether `event` has completed; throws actorch::error when the device reports an error.
  virtual bool event_completed(void* event) = 0;
  /// Blocks until `event` has completed (false when the device reports an error).
  virtual bool synchronize_event(void* event) noexcept = 0;
  virtual void destroy_event(void* event) noexcept = 0;
};

/// The stream a block is used on: a cudaStream_t cast to an integer (0 is the default stream).
using stream_id = std::uintptr_t;

/// One device's counters, as torch.cuda.memory_stats() reports them ("allocated_bytes.all.current"
/// is allocated_bytes, and so on). Byte counts are of rounded blocks, as in PyTorch, except
/// requested_bytes, which sums the sizes callers asked for.
struct caching_allocator_stats {
  size_t allocated_bytes = 0;      ///< in blocks handed out and not yet freed
  size_t requested_bytes = 0;      ///< what the callers of those blocks asked for
  size_t reserved_bytes = 0;       ///< in segments held from the backend (allocated + cached)
  size_t peak_allocated_bytes = 0; ///< since construction or reset_peak_stats()
  size_t peak_reserved_bytes = 0;
  size_t segments = 0;        ///< segments held now
  size_t active_blocks = 0;   ///< blocks handed out now
  size_t awaiting_blocks = 0; ///< freed blocks waiting for other streams' events (record_stream)
  uint64_t num_allocs = 0;    ///< allocate() calls that succeeded
  uint64_t num_frees = 0;     ///< deallocate() calls
  uint64_t num_segment_allocs = 0; ///< successful raw_alloc calls
  uint64_t num_segment_frees = 0;  ///< raw_free calls
  uint64_t num_alloc_retries = 0;  ///< raw_alloc failures followed by freeing the cache and a retry
  uint64_t num_ooms = 0;           ///< allocate() calls that threw out of memory
};

/// One segment as memory_snapshot() shows it: its blocks in address order.
struct caching_allocator_segment {
  int device = 0;
  stream_id stream = 0;
  uintptr_t address = 0;
  size_t total_size = 0;
  bool is_small = false; ///< from the small pool (a 2 MiB segment of blocks <= 1 MiB)
  struct block_info {
    size_t size;
    bool allocated;
  };
  std::vector<block_info> blocks;
};

/// Caches device memory per (device, stream): freed blocks go back to a pool and are handed out
/// again to allocations on the same stream, split and coalesced inside the segments they were
/// carved from. Thread-safe: one mutex guards every call (PyTorch holds one per device).
class caching_allocator {
public:
  /// Bytes are rounded up to multiples of this; an allocation of 0 bytes takes one such block.
  static constexpr size_t kMinBlockSize = 512;
  /// Requests up to this size come from the small pool...
  static constexpr size_t kSmallSize = 1 << 20;
  /// ...carved out of segments of this size.
  static constexpr size_t kSmallBuffer = 2 << 20;
  /// Large requests below kMinLargeAlloc get a segment of kLargeBuffer, larger ones a segment
  /// rounded up to a multiple of kRoundLarge.
  static constexpr size_t kLargeBuffer = 20 << 20;
  static constexpr size_t kMinLargeAlloc = 10 << 20;
  static constexpr size_t kRoundLarge = 2 << 20;

  /// Block size for a request: at least kMinBlockSize, rounded up to a multiple of it.
  static size_t round_size(size_t nbytes);
  /// Segment size requested from the backend for a block of `rounded` bytes (see the constants).
  static size_t segment_size(size_t rounded);

  /// `backend` must outlive the allocator.
  explicit caching_allocator(caching_allocator_backend* backend);
  /// Returns every segment to the backend; blocks still allocated are leaked to it then.
  ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// Returns at least `nbytes` (aligned to kMinBlockSize within its segment) on `device`, for use
  /// on `stream`. When the backend is out of memory, waits for the blocks record_stream holds,
  /// frees every cached segment of `device` and retries once; then throws actorch::error naming
  /// the device, the size and the statistics.
  void* allocate(size_t nbytes, int device, stream_id stream = 0);
  /// Returns a block to its pool; it may be handed out again to its stream at once, so the
  /// caller must know the stream's work that used it is ordered before any later use. A block
  /// other streams used (record_stream) waits for them first.
  /// @pre `ptr` came from allocate() and was not freed since (else throws actorch::error).
  void deallocate(void* ptr);
  /// torch's Tensor.record_stream: the block at `ptr` is also used by work queued on `stream`.
  /// When the block is freed, an event is recorded on each such stream, and the block returns
  /// to its pool only once they have all completed (seen by later allocate() and empty_cache()
  /// calls). The block's own stream needs nothing. `keep` (the stream's lifetime) is held
  /// until then, so that the stream still exists when the event is recorded on it.
  /// @pre `ptr` came from allocate() and was not freed since (else throws actorch::error).
  void record_stream(void* ptr, stream_id stream, std::shared_ptr<void> keep = nullptr);

  /// Returns every cached segment no block of which is allocated to the backend (all devices).
  void empty_cache();
  void empty_cache(int device);

  /// The counters of `device` (all zero for a device never used).
  caching_allocator_stats stats(int device) const;
  /// Sets the peaks of `device` to the current values.
  void reset_peak_stats(int device);
  /// Every segment held, ordered by (device, address).
  std::vector<caching_allocator_segment> memory_snapshot() const;

private:
  struct block;
  struct block_compare {
    bool operator()(const block* a, const block* b) const;
  };
  using block_pool = std::set<block*, block_compare>;
  struct device_state;

  device_state& state(int device);
  block* find_free_block(block_pool& pool, stream_id stream, size_t size);
  void* allocate_segment(device_state& st, int device, size_t size);
  void free_block(device_state& st, block* b);
  void process_events();
  void wait_for_awaiting_blocks();
  size_t release_cached_blocks(device_state& st, int device);
  [[noreturn]] void throw_out_of_memory(device_state& st, int device, size_t nbytes, size_t segment,
                                        size_t freed_segments, size_t freed_bytes);

  caching_allocator_backend* backend_;
  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<device_state>> devices_;
  std::unordered_map<void*, block*> active_blocks_;
  /// Freed blocks and the events of other streams they wait for (record_stream).
  std::unordered_map<block*, std::vector<void*>> awaiting_;
};

/// "20.00 MiB", as PyTorch's out-of-memory message writes sizes.
std::string format_memory_size(size_t nbytes);

} // namespace actorch
