// buffer_pool: a free list per buffer size, guarded by one mutex (a batch takes a handful of
// buffers, so contention is negligible next to filling them).
#include "core/data/buffer_pool.hpp"

#include <algorithm>

#include "core/ops/factory.hpp"

namespace actorch::data {

std::shared_ptr<buffer_pool> buffer_pool::make(allocator* base) {
  ACTORCH_CHECK(base != nullptr, "buffer_pool: null allocator");
  return std::shared_ptr<buffer_pool>(new buffer_pool(base));
}

buffer_pool::~buffer_pool() {
  for (auto& [nbytes, list] : free_)
    for (void* p : list) base_->deallocate(p, nbytes);
}

tensor buffer_pool::empty(const shape_t& shape, actorch::dtype dt) {
  const size_t nbytes = size_t(checked_numel(shape, "buffer_pool")) * element_size(dt);
  void* p = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto& list = free_[nbytes];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      ++stats_.reuses;
    }
    ++stats_.live;
    stats_.live_bytes += int64_t(nbytes);
    stats_.peak_live = std::max(stats_.peak_live, stats_.live);
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  }
  if (p == nullptr) {
    try {
      p = base_->allocate(nbytes);
    } catch (...) {
      std::lock_guard lock(mutex_);
      --stats_.live;
      stats_.live_bytes -= int64_t(nbytes);
      throw;
    }
    std::lock_guard lock(mutex_);
    ++stats_.allocations;
  }
  // The deleter holds the pool: buffers may outlive the loader that made them.
  return from_blob(
      p, shape, dt, [pool = shared_from_this(), nbytes](void* q) { pool->give_back(q, nbytes); });
}

void buffer_pool::give_back(void* p, size_t nbytes) {
  std::lock_guard lock(mutex_);
  free_[nbytes].push_back(p);
  --stats_.live;
  stats_.live_bytes -= int64_t(nbytes);
}

buffer_pool::stats buffer_pool::get_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

} // namespace actorch::data
