// buffer_pool: a free list per buffer size, guarded by one mutex (a batch takes a handful of
// buffers, so contention is negligible next to filling them).
//
// Note [Buffer affinity]
// ~~~~~~~~~~~~~~~~~~~~~~
// With two or more workers, the buffer released last was most likely
// filled by another worker, on another core. Handing it out LIFO made the taker's collate pull
// every line of it across (a 64x3x32x32 float batch is 768 KiB, and each core's L2 holds a few
// of them), and collate's copies took twice as long as in a single-threaded loop (the P=20
// loader benchmark, profiled). So a buffer remembers the thread that last took it, and a thread
// gets back, preferably, the most recent of its own; another's only when it has none free.
//
// Note [Buffer prefault]
// ~~~~~~~~~~~~~~~~~~~~~~
// A fresh buffer's pages are mapped on first touch, one fault per 4 KiB
// page: 192 faults for a 768 KiB batch, about 400 us on this VM against 40 us to fill it once
// mapped (the first collates of the P=20 loader benchmark, traced; two workers fault at once).
// A pool keeps each buffer for its whole life, so it maps the pages of a fresh one in one
// madvise(MADV_POPULATE_WRITE) call (Linux 5.14), which costs half as much as faulting them in
// one by one. Elsewhere the call fails and the pages fault in as before.
#include "core/data/buffer_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "core/ops/factory.hpp"

namespace actorch::data {

std::shared_ptr<buffer_pool> buffer_pool::make(allocator* base) {
  ACTORCH_CHECK(base != nullptr, "buffer_pool: null allocator");
  return std::shared_ptr<buffer_pool>(new buffer_pool(base));
}

buffer_pool::~buffer_pool() {
  for (auto& [nbytes, list] : free_)
    for (const free_buffer& b : list)
      base_->deallocate(b.p, nbytes);
}

namespace {

/// See Note [Buffer prefault]: maps the whole pages inside [p, p + nbytes) for writing.
void prefault(void* p, size_t nbytes) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (uintptr_t(p) + nbytes) & ~(page - 1);
  if (end >= begin + 16 * page) // below that, the faults cost less than the call
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)nbytes;
#endif
}

} // namespace

tensor buffer_pool::empty(const shape_t& shape, actorch::dtype dt) {
  const size_t nbytes = size_t(checked_numel(shape, "buffer_pool")) * element_size(dt);
  const std::thread::id me = std::this_thread::get_id();
  void* p = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto& list = free_[nbytes];
    if (!list.empty()) {
      // See Note [Buffer affinity]: this thread's most recent buffer, else the most recent.
      auto it = std::find_if(list.rbegin(), list.rend(),
                             [&](const free_buffer& b) { return b.filler == me; });
      auto pick = it == list.rend() ? std::prev(list.end()) : std::prev(it.base());
      p = pick->p;
      list.erase(pick);
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
    prefault(p, nbytes);
    std::lock_guard lock(mutex_);
    ++stats_.allocations;
  }
  // The deleter holds the pool: buffers may outlive the loader that made them.
  return from_blob(p, shape, dt, [pool = shared_from_this(), nbytes, me](void* q) {
    pool->give_back({q, me}, nbytes);
  });
}

void buffer_pool::give_back(free_buffer b, size_t nbytes) {
  std::lock_guard lock(mutex_);
  free_[nbytes].push_back(b);
  --stats_.live;
  stats_.live_bytes -= int64_t(nbytes);
}

buffer_pool::stats buffer_pool::get_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

} // namespace actorch::data
