// buffer_pool: recycled memory for batches. The loader's collate writes each batch into tensors
// whose storage comes from here; when the consumer drops the batch, the storage's memory goes
// back to the pool's free list instead of the allocator, so a steady-state epoch allocates
// nothing. The pool is shared (shared_ptr) by every buffer it lent, so it outlives them all.
// A thread asking for a buffer gets one it filled itself when there is one: see Note [Buffer
// affinity] in buffer_pool.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/allocator.hpp"
#include "core/tensor.hpp"

namespace actorch::data {

class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
  /// Memory comes from `base` (cpu_allocator() or pinned_allocator()).
  static std::shared_ptr<buffer_pool> make(allocator* base);
  ~buffer_pool();

  /// A contiguous tensor over pooled memory (contents undefined); preferably a buffer this
  /// thread had before.
  tensor empty(const shape_t& shape, actorch::dtype dt);

  struct stats {
    int64_t live = 0;        // buffers lent and not yet returned
    int64_t peak_live = 0;   // the most ever lent at once
    int64_t allocations = 0; // buffers taken from the base allocator (misses)
    int64_t reuses = 0;      // buffers served from the free list (hits)
    int64_t live_bytes = 0;
    int64_t peak_live_bytes = 0;
  };
  stats get_stats() const;
  allocator* base() const { return base_; }

private:
  explicit buffer_pool(allocator* base) : base_(base) {}
  struct free_buffer {
    void* p;
    std::thread::id filler; // the thread that took it last: its cache may still hold it
  };
  void give_back(free_buffer b, size_t nbytes);

  allocator* base_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<free_buffer>> free_; // by size in bytes
  stats stats_;
};

using buffer_pool_ptr = std::shared_ptr<buffer_pool>;

} // namespace actorch::data
