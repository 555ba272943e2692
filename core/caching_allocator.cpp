// The caching allocator: pools of free blocks per device, best fit per stream, splitting and
// coalescing inside segments, and the out-of-memory retry.
#include "core/caching_allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "base/error.hpp"
#include "core/allocator.hpp"

namespace actorch {

// Note [Caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's CUDACachingAllocator, as its documentation and c10/cuda/CUDACachingAllocator.cpp
// describe it:
// - A request is rounded up to a multiple of 512 bytes (at least 512). Requests up to 1 MiB come
//   from the small pool, carved out of 2 MiB segments; larger ones from the large pool, whose
//   segments are 20 MiB for requests under 10 MiB and the request rounded up to a multiple of
//   2 MiB from 10 MiB on. (So a 3 MiB tensor reserves 20 MiB, and the 17 MiB left over serve the
//   next large requests of the stream.)
// - A free block is found by best fit within the pool: the smallest free block of the same
//   device and stream that is large enough, the lowest address among equals. Pools are keyed by
//   stream because a block freed on one stream may still be read by work queued on it: handing
//   it to another stream would need an event, so we never do.
// - record_stream(ptr, s): a block also used on stream s is, when freed, held back (neither in
//   a pool nor merged with its neighbours) with an event recorded on each such stream; each
//   allocate() and empty_cache() first returns to their pools the held blocks whose events
//   have all completed, and an allocation the backend refuses waits for every held block
//   before freeing the cache. Its statistics count it as freed at once, as PyTorch's do.
// - A block larger than the request is split: in the small pool when at least 512 bytes
//   remain, in the large pool only when more than 1 MiB remains (a smaller tail stays with the
//   block rather than splinter the large pool). The remainder is a free block of the same
//   segment.
// - A freed block merges with its free neighbours in its segment (blocks of a segment form a
//   doubly linked list in address order), so a segment whose blocks are all free is one block
//   again, and empty_cache() can give it back to the backend.
// - When the backend is out of memory, every cached segment of the device is freed and the
//   request is tried once more; if that fails too the error says how much is allocated and how
//   much is cached. (PyTorch first frees only enough of the largest cached segments, then all;
//   freeing all at once is simpler and frees at least as much.)
// Left out from PyTorch: max_split_size_mb and the garbage-collection threshold, expandable
// segments, and events before releasing segments (cudaFree synchronises the device itself). An
// allocation of 0 bytes takes a 512-byte block rather than returning nullptr, as actorch's
// allocator interface promises a unique non-null pointer.

struct caching_allocator::block {
  int device;
  stream_id stream;
  size_t size;
  size_t requested = 0; // what the caller asked for, while allocated
  char* ptr;
  bool is_small;
  bool allocated = false;
  bool awaiting = false; // freed, waiting for events (record_stream)
  // Other streams that used it while allocated, each with its lifetime (record_stream).
  std::vector<std::pair<stream_id, std::shared_ptr<void>>> stream_uses = {};
  block* prev = nullptr; // neighbours in the same segment, in address order
  block* next = nullptr;

  bool is_free() const { return !allocated && !awaiting; }
};

bool caching_allocator::block_compare::operator()(const block* a, const block* b) const {
  return std::make_tuple(a->stream, a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->stream, b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

struct caching_allocator::device_state {
  block_pool small_pool;
  block_pool large_pool;
  caching_allocator_stats stats;

  block_pool& pool(bool small) { return small ? small_pool : large_pool; }
};

size_t caching_allocator::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize)
    return kMinBlockSize;
  return round_up_bytes(nbytes, kMinBlockSize, "caching allocator");
}

size_t caching_allocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize)
    return kSmallBuffer;
  if (rounded < kMinLargeAlloc)
    return kLargeBuffer;
  return round_up_bytes(rounded, kRoundLarge, "caching allocator");
}

caching_allocator::caching_allocator(caching_allocator_backend* backend) : backend_(backend) {
  ACTORCH_CHECK(backend_ != nullptr, "caching allocator: the backend is null");
}

caching_allocator::~caching_allocator() {
  // Every block is either in a pool or active; each segment is freed through its first block.
  std::vector<block*> all;
  for (auto& [device, st] : devices_)
    for (block_pool* pool : {&st->small_pool, &st->large_pool})
      all.insert(all.end(), pool->begin(), pool->end());
  for (auto& [ptr, b] : active_blocks_)
    all.push_back(b);
  for (auto& [b, events] : awaiting_) {
    all.push_back(b);
    for (void* e : events)
      if (e != nullptr)
        backend_->destroy_event(e);
  }
  for (block* b : all)
    if (b->prev == nullptr)
      backend_->raw_free(b->ptr, b->device);
  for (block* b : all)
    delete b;
}

caching_allocator::device_state& caching_allocator::state(int device) {
  auto& st = devices_[device];
  if (!st)
    st = std::make_unique<device_state>();
  return *st;
}

caching_allocator::block* caching_allocator::find_free_block(block_pool& pool, stream_id stream,
                                                             size_t size) {
  block key{.device = 0, .stream = stream, .size = size, .ptr = nullptr, .is_small = false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream)
    return nullptr;
  block* b = *it;
  pool.erase(it);
  return b;
}

void* caching_allocator::allocate_segment(device_state& st, int device, size_t size) {
  void* p = backend_->raw_alloc(size, device);
  if (p == nullptr)
    return nullptr;
  st.stats.reserved_bytes += size;
  st.stats.peak_reserved_bytes = std::max(st.stats.peak_reserved_bytes, st.stats.reserved_bytes);
  ++st.stats.segments;
  ++st.stats.num_segment_allocs;
  return p;
}

void* caching_allocator::allocate(size_t nbytes, int device, stream_id stream) {
  ACTORCH_CHECK(device >= 0, "caching allocator: device index must be non-negative, got ", device);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  std::lock_guard lock(mutex_);
  process_events();
  device_state& st = state(device);
  block_pool& pool = st.pool(small);

  block* b = find_free_block(pool, stream, size);
  if (b == nullptr) {
    // A new segment; when the backend is out of memory, give it back our cache and retry once.
    const size_t segment = segment_size(size);
    void* p = allocate_segment(st, device, segment);
    size_t freed_segments = 0, freed_bytes = 0;
    if (p == nullptr) {
      wait_for_awaiting_blocks();
      const size_t reserved_before = st.stats.reserved_bytes;
      freed_segments = release_cached_blocks(st, device);
      freed_bytes = reserved_before - st.stats.reserved_bytes;
      ++st.stats.num_alloc_retries;
      p = allocate_segment(st, device, segment);
    }
    if (p == nullptr)
      throw_out_of_memory(st, device, nbytes, segment, freed_segments, freed_bytes);
    b = new block{.device = device,
                  .stream = stream,
                  .size = segment,
                  .ptr = static_cast<char*>(p),
                  .is_small = small};
  }

  // Split off the tail as a free block of the same segment (see Note [Caching allocator]).
  const size_t remaining = b->size - size;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    block* tail = new block{.device = device,
                            .stream = stream,
                            .size = remaining,
                            .ptr = b->ptr + size,
                            .is_small = small};
    tail->prev = b;
    tail->next = b->next;
    if (b->next)
      b->next->prev = tail;
    b->next = tail;
    b->size = size;
    pool.insert(tail);
  }

  b->allocated = true;
  b->requested = nbytes;
  active_blocks_.emplace(b->ptr, b);
  caching_allocator_stats& s = st.stats;
  s.allocated_bytes += b->size;
  s.requested_bytes += nbytes;
  s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  ++s.active_blocks;
  ++s.num_allocs;
  return b->ptr;
}

void caching_allocator::deallocate(void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(ptr);
  ACTORCH_CHECK(it != active_blocks_.end(), "caching allocator: deallocate(", ptr,
                "): the pointer was not returned by allocate() or was freed already");
  block* b = it->second;
  active_blocks_.erase(it);
  device_state& st = *devices_.at(b->device);
  caching_allocator_stats& s = st.stats;
  s.allocated_bytes -= b->size;
  s.requested_bytes -= b->requested;
  --s.active_blocks;
  ++s.num_frees;
  if (b->stream_uses.empty()) {
    free_block(st, b);
    return;
  }
  std::vector<void*> events;
  for (const auto& [used, lifetime] : b->stream_uses)
    events.push_back(backend_->record_event(b->device, used)); // nullptr: never completes
  b->stream_uses.clear();
  b->allocated = false;
  b->awaiting = true;
  awaiting_.emplace(b, std::move(events));
  ++s.awaiting_blocks;
}

void caching_allocator::wait_for_awaiting_blocks() {
  for (auto& [b, events] : awaiting_)
    for (void* e : events)
      if (e != nullptr)
        (void)backend_->synchronize_event(e); // an error: event_completed throws it below
  process_events();
}

void caching_allocator::record_stream(void* ptr, stream_id stream, std::shared_ptr<void> keep) {
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(ptr);
  ACTORCH_CHECK(it != active_blocks_.end(), "record_stream: the memory at ", ptr,
                " was not handed out by the caching allocator, or was freed already");
  block* b = it->second;
  if (stream != b->stream && std::none_of(b->stream_uses.begin(), b->stream_uses.end(),
                                          [&](const auto& use) { return use.first == stream; }))
    b->stream_uses.emplace_back(stream, std::move(keep));
}

void caching_allocator::process_events() {
  for (auto it = awaiting_.begin(); it != awaiting_.end();) {
    auto& [b, events] = *it;
    for (size_t k = 0; k < events.size();) { // consistent whenever event_completed throws
      if (events[k] == nullptr || !backend_->event_completed(events[k])) {
        ++k;
        continue;
      }
      backend_->destroy_event(events[k]);
      events[k] = events.back();
      events.pop_back();
    }
    if (!events.empty()) {
      ++it;
      continue;
    }
    block* done = b;
    it = awaiting_.erase(it);
    device_state& st = *devices_.at(done->device);
    done->awaiting = false;
    --st.stats.awaiting_blocks;
    free_block(st, done);
  }
}

void caching_allocator::free_block(device_state& st, block* b) {
  // Merge with free neighbours: a free block is always in its pool, so take it out before its
  // size (part of the pool's key) changes.
  block_pool& pool = st.pool(b->is_small);
  b->allocated = false;
  b->requested = 0;
  auto absorb = [](block* left, block* right) { // `right` leaves the segment's list
    left->size += right->size;
    left->next = right->next;
    if (right->next)
      right->next->prev = left;
    delete right;
  };
  if (block* prev = b->prev; prev && prev->is_free()) {
    pool.erase(prev);
    absorb(prev, b);
    b = prev;
  }
  if (block* next = b->next; next && next->is_free()) {
    pool.erase(next);
    absorb(b, next);
  }
  pool.insert(b);
}

size_t caching_allocator::release_cached_blocks(device_state& st, int device) {
  // A free block without neighbours is a whole segment no one uses.
  size_t released = 0;
  for (block_pool* pool : {&st.small_pool, &st.large_pool}) {
    for (auto it = pool->begin(); it != pool->end();) {
      block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      backend_->raw_free(b->ptr, device);
      st.stats.reserved_bytes -= b->size;
      --st.stats.segments;
      ++st.stats.num_segment_frees;
      ++released;
      delete b;
    }
  }
  return released;
}

void caching_allocator::empty_cache() {
  std::lock_guard lock(mutex_);
  process_events();
  for (auto& [device, st] : devices_)
    release_cached_blocks(*st, device);
}

void caching_allocator::empty_cache(int device) {
  std::lock_guard lock(mutex_);
  process_events();
  auto it = devices_.find(device);
  if (it != devices_.end())
    release_cached_blocks(*it->second, device);
}

caching_allocator_stats caching_allocator::stats(int device) const {
  std::lock_guard lock(mutex_);
  auto it = devices_.find(device);
  return it == devices_.end() ? caching_allocator_stats{} : it->second->stats;
}

void caching_allocator::reset_peak_stats(int device) {
  std::lock_guard lock(mutex_);
  auto it = devices_.find(device);
  if (it == devices_.end())
    return;
  caching_allocator_stats& s = it->second->stats;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
}

std::vector<caching_allocator_segment> caching_allocator::memory_snapshot() const {
  std::lock_guard lock(mutex_);
  // Segment heads: free ones sit in the pools, allocated ones in active_blocks_.
  std::vector<const block*> heads;
  for (const auto& [device, st] : devices_)
    for (const block_pool* pool : {&st->small_pool, &st->large_pool})
      for (const block* b : *pool)
        if (b->prev == nullptr)
          heads.push_back(b);
  for (const auto& [ptr, b] : active_blocks_)
    if (b->prev == nullptr)
      heads.push_back(b);
  for (const auto& [b, events] : awaiting_)
    if (b->prev == nullptr)
      heads.push_back(b);
  std::sort(heads.begin(), heads.end(), [](const block* a, const block* b) {
    return std::make_pair(a->device, reinterpret_cast<uintptr_t>(a->ptr)) <
           std::make_pair(b->device, reinterpret_cast<uintptr_t>(b->ptr));
  });
  std::vector<caching_allocator_segment> out;
  for (const block* head : heads) {
    caching_allocator_segment seg;
    seg.device = head->device;
    seg.stream = head->stream;
    seg.address = reinterpret_cast<uintptr_t>(head->ptr);
    seg.is_small = head->is_small;
    for (const block* b = head; b; b = b->next) {
      seg.total_size += b->size;
      seg.blocks.push_back({b->size, b->allocated});
    }
    out.push_back(std::move(seg));
  }
  return out;
}

void caching_allocator::throw_out_of_memory(device_state& st, int device, size_t nbytes,
                                            size_t segment, size_t freed_segments,
                                            size_t freed_bytes) {
  // PyTorch's wording, so that a user searching for it finds the usual advice.
  caching_allocator_stats& s = st.stats;
  ++s.num_ooms;
  const std::string memory = backend_->describe_memory(device);
  ACTORCH_FAIL(backend_->name(), " out of memory on device ", device, ". Tried to allocate ",
               format_memory_size(nbytes), " (a ", format_memory_size(segment),
               " segment; the allocator freed ", freed_segments, " cached segment(s) of ",
               format_memory_size(freed_bytes), " and retried). ", memory,
               memory.empty() ? "" : " ", "Of the memory on this device, ",
               format_memory_size(s.allocated_bytes), " is allocated and ",
               format_memory_size(s.reserved_bytes - s.allocated_bytes),
               " is reserved by the caching allocator but unallocated (reserved in all: ",
               format_memory_size(s.reserved_bytes), " in ", s.segments,
               " segment(s); peak allocated: ", format_memory_size(s.peak_allocated_bytes),
               "; allocations: ", s.num_allocs, ", frees: ", s.num_frees, ").");
}

std::string format_memory_size(size_t nbytes) {
  char buf[64];
  const double n = static_cast<double>(nbytes);
  if (nbytes < 1024)
    std::snprintf(buf, sizeof buf, "%zu bytes", nbytes);
  else if (nbytes < (size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f KiB", n / 1024.0);
  else if (nbytes < (size_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f MiB", n / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", n / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

} // namespace actorch
