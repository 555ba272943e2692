// The caching allocator over a fake backend that hands out host memory and records every call,
// so each rule of Note [Caching allocator] is checked without a GPU; then the real cudaMalloc
// backend, which skips where no GPU is present.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "core/caching_allocator.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/gpu.hpp"

using namespace actorch;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Host memory standing in for device memory, with a capacity per device to make it run out.
class fake_backend final : public caching_allocator_backend {
public:
  struct call {
    bool alloc; // raw_alloc (true) or raw_free
    size_t nbytes;
    int device;
    void* ptr; // nullptr for a refused raw_alloc
  };

  explicit fake_backend(size_t capacity = size_t(1) << 40) : capacity_(capacity) {}
  ~fake_backend() override {
    CHECK(live_ == 0);
    CHECK(events_.empty());
  }

  void* raw_alloc(size_t nbytes, int device) override {
    std::lock_guard lock(mutex_);
    if (used_[device] + nbytes > capacity_) {
      calls_.push_back({true, nbytes, device, nullptr});
      return nullptr;
    }
    void* p = std::aligned_alloc(512, nbytes);
    if (p == nullptr) // no Catch2 assertion here: the stress test calls this from many threads
      std::abort();
    used_[device] += nbytes;
    sizes_.push_back({p, nbytes});
    ++live_;
    calls_.push_back({true, nbytes, device, p});
    return p;
  }
  void raw_free(void* ptr, int device) noexcept override {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(sizes_.begin(), sizes_.end(), [&](auto& s) { return s.first == ptr; });
    if (it == sizes_.end()) {
      bad_frees_ = true;
      return;
    }
    used_[device] -= it->second;
    calls_.push_back({false, it->second, device, ptr});
    sizes_.erase(it);
    --live_;
    std::free(ptr);
  }
  std::string_view name() const override { return "CUDA"; }
  std::string describe_memory(int device) override {
    return "GPU " + std::to_string(device) + " is fake.";
  }

  // Events: an id per record, complete once the test says their stream has run (finish()).
  void* record_event(int, std::uintptr_t stream) noexcept override {
    std::lock_guard lock(mutex_);
    const std::uintptr_t id = ++next_event_;
    events_[id] = {stream, false};
    return reinterpret_cast<void*>(id);
  }
  bool event_completed(void* event) override {
    std::lock_guard lock(mutex_);
    return events_.at(reinterpret_cast<std::uintptr_t>(event)).second;
  }
  bool synchronize_event(void* event) noexcept override { // the stream runs to the event
    std::lock_guard lock(mutex_);
    events_.at(reinterpret_cast<std::uintptr_t>(event)).second = true;
    ++synchronized_;
    return true;
  }
  void destroy_event(void* event) noexcept override {
    std::lock_guard lock(mutex_);
    events_.erase(reinterpret_cast<std::uintptr_t>(event));
  }
  size_t synchronized_events() const {
    std::lock_guard lock(mutex_);
    return synchronized_;
  }
  /// Completes every event recorded on `stream` so far.
  void finish(std::uintptr_t stream) {
    std::lock_guard lock(mutex_);
    for (auto& [id, e] : events_)
      if (e.first == stream)
        e.second = true;
  }
  size_t live_events() const {
    std::lock_guard lock(mutex_);
    return events_.size();
  }

  std::vector<call> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  size_t live_segments() const {
    std::lock_guard lock(mutex_);
    return live_;
  }
  bool bad_frees() const { return bad_frees_; }
  void capacity(size_t c) {
    std::lock_guard lock(mutex_);
    capacity_ = c;
  }

private:
  mutable std::mutex mutex_;
  size_t capacity_;
  std::map<int, size_t> used_;
  std::vector<std::pair<void*, size_t>> sizes_;
  std::vector<call> calls_;
  size_t live_ = 0;
  bool bad_frees_ = false;
  std::uintptr_t next_event_ = 0;
  size_t synchronized_ = 0;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, bool>> events_; // id -> (stream, done)
};

char* as_bytes(void* p) {
  return static_cast<char*>(p);
}

size_t count_allocs(const std::vector<fake_backend::call>& calls) {
  return size_t(std::count_if(calls.begin(), calls.end(), [](auto& c) { return c.alloc; }));
}

} // namespace

TEST_CASE("caching allocator rounds requests and sizes segments as PyTorch does",
          "[core][caching_allocator]") {
  using ca = caching_allocator;
  CHECK(ca::round_size(0) == 512);
  CHECK(ca::round_size(1) == 512);
  CHECK(ca::round_size(512) == 512);
  CHECK(ca::round_size(513) == 1024);
  CHECK(ca::round_size(1000 * 1000) == 1000448);
  // Small pool: 2 MiB segments for anything up to 1 MiB.
  CHECK(ca::segment_size(512) == 2 * MiB);
  CHECK(ca::segment_size(1 * MiB) == 2 * MiB);
  // Large pool: 20 MiB below 10 MiB, then rounded up to 2 MiB multiples.
  CHECK(ca::segment_size(1 * MiB + 512) == 20 * MiB);
  CHECK(ca::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(ca::segment_size(10 * MiB) == 10 * MiB);
  CHECK(ca::segment_size(11 * MiB) == 12 * MiB);
  CHECK(ca::segment_size(100 * MiB + 512) == 102 * MiB);
  CHECK_THROWS_WITH(ca::round_size(~size_t(0)), Catch::Contains("size overflow"));

  fake_backend backend;
  caching_allocator a(&backend);
  SECTION("a small request takes a 512-byte multiple from a 2 MiB segment") {
    void* p = a.allocate(1000, 0);
    auto calls = backend.calls();
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].nbytes == 2 * MiB);
    auto s = a.stats(0);
    CHECK(s.allocated_bytes == 1024);
    CHECK(s.requested_bytes == 1000);
    CHECK(s.reserved_bytes == 2 * MiB);
    a.deallocate(p);
  }
  SECTION("a 3 MiB request reserves 20 MiB, a 30 MiB one reserves exactly 30 MiB") {
    void* p = a.allocate(3 * MiB, 0);
    void* q = a.allocate(30 * MiB, 0);
    auto calls = backend.calls();
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].nbytes == 20 * MiB);
    CHECK(calls[1].nbytes == 30 * MiB);
    CHECK(a.stats(0).reserved_bytes == 50 * MiB);
    CHECK(a.stats(0).allocated_bytes == 33 * MiB);
    a.deallocate(p);
    a.deallocate(q);
  }
  SECTION("0 bytes gives a unique non-null 512-byte block") {
    void* p = a.allocate(0, 0);
    void* q = a.allocate(0, 0);
    CHECK(p != nullptr);
    CHECK(q != nullptr);
    CHECK(p != q);
    CHECK(a.stats(0).allocated_bytes == 1024);
    a.deallocate(p);
    a.deallocate(q);
  }
}

TEST_CASE("caching allocator reuses a freed block without calling the backend",
          "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  void* p = a.allocate(4096, 0);
  a.deallocate(p);
  CHECK(a.stats(0).allocated_bytes == 0);
  CHECK(a.stats(0).reserved_bytes == 2 * MiB); // cached, not returned
  void* q = a.allocate(4000, 0);               // rounds to the same 4096
  CHECK(q == p);
  CHECK(backend.calls().size() == 1);
  a.deallocate(q);

  SECTION("best fit: the smallest free block large enough, not the first") {
    // Two separate small segments' worth of blocks: free a 64 KiB and a 16 KiB hole.
    void* big = a.allocate(64 * KiB, 0);
    void* sep1 = a.allocate(512, 0);
    void* mid = a.allocate(16 * KiB, 0);
    void* sep2 = a.allocate(512, 0);
    a.deallocate(big);
    a.deallocate(mid);
    void* r = a.allocate(10 * KiB, 0);
    CHECK(r == mid);
    a.deallocate(r);
    a.deallocate(sep1);
    a.deallocate(sep2);
  }
  SECTION("large blocks are reused and split only when more than 1 MiB remains") {
    void* l = a.allocate(3 * MiB, 0); // a 20 MiB segment: 3 MiB + 17 MiB free
    auto snap = a.memory_snapshot();
    REQUIRE(snap.size() == 2);
    const auto& large = snap[0].is_small ? snap[1] : snap[0];
    CHECK_FALSE(large.is_small);
    REQUIRE(large.blocks.size() == 2);
    CHECK(large.blocks[0].size == 3 * MiB);
    CHECK(large.blocks[0].allocated);
    CHECK(large.blocks[1].size == 17 * MiB);
    CHECK_FALSE(large.blocks[1].allocated);
    // 16.5 MiB from the 17 MiB block: the 0.5 MiB tail stays attached (no split).
    void* m = a.allocate(16 * MiB + 512 * KiB, 0);
    CHECK(as_bytes(m) == as_bytes(l) + 3 * MiB);
    CHECK(a.stats(0).allocated_bytes == 20 * MiB);
    CHECK(count_allocs(backend.calls()) == 2);
    a.deallocate(l);
    a.deallocate(m);
  }
}

TEST_CASE("caching allocator splits segments and coalesces free neighbours",
          "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  void* x = a.allocate(100 * KiB, 0);
  void* y = a.allocate(200 * KiB, 0);
  void* z = a.allocate(300 * KiB, 0);
  // All three carved in address order from one 2 MiB segment.
  CHECK(count_allocs(backend.calls()) == 1);
  CHECK(as_bytes(y) == as_bytes(x) + 100 * KiB);
  CHECK(as_bytes(z) == as_bytes(y) + 200 * KiB);
  auto blocks = [&] { return a.memory_snapshot().at(0).blocks; };
  REQUIRE(blocks().size() == 4); // x, y, z, the free tail
  CHECK(blocks()[3].size == 2 * MiB - 600 * KiB);

  SECTION("freeing the middle then its left neighbour merges them into one block") {
    a.deallocate(y);
    CHECK(blocks().size() == 4);
    a.deallocate(x);
    REQUIRE(blocks().size() == 3);
    CHECK(blocks()[0].size == 300 * KiB);
    CHECK_FALSE(blocks()[0].allocated);
    // The merged hole serves a request neither half could.
    void* w = a.allocate(250 * KiB, 0);
    CHECK(w == x);
    CHECK(count_allocs(backend.calls()) == 1);
    a.deallocate(w);
    a.deallocate(z);
  }
  SECTION("freeing every block leaves one free block the size of the segment") {
    a.deallocate(x);
    a.deallocate(z); // merges with the free tail on its right
    REQUIRE(blocks().size() == 3);
    a.deallocate(y); // merges both ways
    REQUIRE(blocks().size() == 1);
    CHECK(blocks()[0].size == 2 * MiB);
    CHECK_FALSE(blocks()[0].allocated);
    // Whole again, so empty_cache can give it back.
    a.empty_cache();
    CHECK(a.memory_snapshot().empty());
    CHECK(backend.live_segments() == 0);
  }
  SECTION("a free block partly filled again keeps the rest as a free tail") {
    a.deallocate(y);
    void* v = a.allocate(50 * KiB, 0);
    CHECK(v == y);
    auto b = blocks();
    REQUIRE(b.size() == 5);
    CHECK(b[1].size == 50 * KiB);
    CHECK(b[2].size == 150 * KiB);
    CHECK_FALSE(b[2].allocated);
    a.deallocate(v);
    a.deallocate(x);
    a.deallocate(z);
    CHECK(blocks().size() == 1);
  }
}

TEST_CASE("caching allocator reuses freed blocks for the same stream and device only",
          "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  const stream_id s1 = 0x1000, s2 = 0x2000;
  void* p = a.allocate(8 * KiB, 0, s1);
  a.deallocate(p);
  SECTION("another stream gets a segment of its own") {
    void* q = a.allocate(8 * KiB, 0, s2);
    CHECK(q != p);
    CHECK(count_allocs(backend.calls()) == 2);
    auto snap = a.memory_snapshot();
    REQUIRE(snap.size() == 2);
    CHECK(((snap[0].stream == s1 && snap[1].stream == s2) ||
           (snap[0].stream == s2 && snap[1].stream == s1)));
    // The first stream still gets its block back.
    void* r = a.allocate(8 * KiB, 0, s1);
    CHECK(r == p);
    a.deallocate(q);
    a.deallocate(r);
  }
  SECTION("another device gets a segment of its own, with its own statistics") {
    void* q = a.allocate(8 * KiB, 1, s1);
    CHECK(q != p);
    auto calls = backend.calls();
    REQUIRE(calls.size() == 2);
    CHECK(calls[1].device == 1);
    CHECK(a.stats(1).allocated_bytes == 8 * KiB);
    CHECK(a.stats(1).reserved_bytes == 2 * MiB);
    CHECK(a.stats(0).allocated_bytes == 0);
    CHECK(a.stats(0).reserved_bytes == 2 * MiB);
    a.deallocate(q);
    a.empty_cache(1);
    CHECK(a.stats(1).reserved_bytes == 0);
    CHECK(a.stats(0).reserved_bytes == 2 * MiB);
  }
  CHECK(a.stats(7).num_allocs == 0); // a device never used
}

TEST_CASE("caching allocator holds a block another stream used until that stream's event",
          "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  const stream_id s1 = 0x1000, s2 = 0x2000, s3 = 0x3000;
  void* p = a.allocate(8 * KiB, 0, s1);
  void* neighbour = a.allocate(8 * KiB, 0, s1); // the next block of p's segment
  REQUIRE(as_bytes(neighbour) == as_bytes(p) + 8 * KiB);
  a.record_stream(p, s2);
  a.record_stream(p, s3);
  a.record_stream(p, s2); // once per stream
  a.record_stream(p, s1); // its own stream needs nothing
  a.deallocate(p);
  CHECK(backend.live_events() == 2);
  CHECK(a.stats(0).awaiting_blocks == 1);
  CHECK(a.stats(0).allocated_bytes == 8 * KiB); // counted as freed at once, as in PyTorch
  // Held back: its stream gets other memory, and its free neighbour does not absorb it.
  void* q = a.allocate(8 * KiB, 0, s1);
  CHECK(q != p);
  a.deallocate(neighbour);
  a.deallocate(q);
  auto snap = a.memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].blocks.size() == 2); // p's block held, the rest of the segment free
  backend.finish(s2);
  void* r = a.allocate(8 * KiB, 0, s1);
  CHECK(r != p); // s3 has not run yet
  a.deallocate(r);
  backend.finish(s3);
  void* again = a.allocate(8 * KiB, 0, s1); // the events are checked first: p is back
  CHECK(again == p);
  CHECK(backend.live_events() == 0);
  CHECK(a.stats(0).awaiting_blocks == 0);
  a.deallocate(again);
  snap = a.memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].blocks.size() == 1); // coalesced once it was free
  CHECK_THROWS_WITH(a.record_stream(p, s2), Catch::Contains("record_stream: the memory at") &&
                                                Catch::Contains("or was freed already"));
  // An allocator destroyed while a block waits gives back its segment and its events.
  void* held = a.allocate(100, 0, s1);
  a.record_stream(held, s2);
  a.deallocate(held);
  CHECK(backend.live_events() == 1);
}

TEST_CASE("caching allocator counts bytes, blocks and segments, with peaks",
          "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  void* p = a.allocate(1 * MiB, 0);  // small pool, 2 MiB segment
  void* q = a.allocate(16 * MiB, 0); // large pool, 16 MiB segment
  auto s = a.stats(0);
  CHECK(s.allocated_bytes == 17 * MiB);
  CHECK(s.reserved_bytes == 18 * MiB);
  CHECK(s.peak_allocated_bytes == 17 * MiB);
  CHECK(s.peak_reserved_bytes == 18 * MiB);
  CHECK(s.segments == 2);
  CHECK(s.active_blocks == 2);
  CHECK(s.num_allocs == 2);
  CHECK(s.num_frees == 0);
  CHECK(s.num_segment_allocs == 2);

  a.deallocate(q);
  s = a.stats(0);
  CHECK(s.allocated_bytes == 1 * MiB);
  CHECK(s.peak_allocated_bytes == 17 * MiB);
  CHECK(s.reserved_bytes == 18 * MiB);
  CHECK(s.num_frees == 1);
  CHECK(s.active_blocks == 1);

  a.reset_peak_stats(0);
  s = a.stats(0);
  CHECK(s.peak_allocated_bytes == 1 * MiB);
  CHECK(s.peak_reserved_bytes == 18 * MiB);

  a.empty_cache(); // the 16 MiB segment goes; the 2 MiB one holds p
  s = a.stats(0);
  CHECK(s.reserved_bytes == 2 * MiB);
  CHECK(s.segments == 1);
  CHECK(s.num_segment_frees == 1);
  CHECK(s.peak_reserved_bytes == 18 * MiB);
  a.reset_peak_stats(0);
  CHECK(a.stats(0).peak_reserved_bytes == 2 * MiB);

  auto calls = backend.calls();
  REQUIRE(calls.size() == 3);
  CHECK_FALSE(calls[2].alloc);
  CHECK(calls[2].nbytes == 16 * MiB);

  a.deallocate(p);
  CHECK(a.stats(0).allocated_bytes == 0);
  CHECK(a.stats(0).requested_bytes == 0);
  a.empty_cache();
  CHECK(a.stats(0).reserved_bytes == 0);
  CHECK(a.stats(0).segments == 0);
  CHECK(backend.live_segments() == 0);
}

TEST_CASE("caching allocator rejects pointers it did not hand out", "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  void* p = a.allocate(100, 0);
  int local = 0;
  CHECK_THROWS_WITH(a.deallocate(&local), Catch::Contains("was not returned by allocate()"));
  a.deallocate(p);
  CHECK_THROWS_WITH(a.deallocate(p), Catch::Contains("freed already"));
  CHECK_THROWS_WITH(a.allocate(1, -1), Catch::Contains("device index must be non-negative"));
  CHECK(a.stats(0).num_frees == 1);
}

TEST_CASE("caching allocator frees its cache and retries when the backend runs out",
          "[core][caching_allocator]") {
  fake_backend backend(40 * MiB);
  caching_allocator a(&backend);
  // Fill the cache: two 20 MiB segments, both freed but kept.
  void* p = a.allocate(2 * MiB, 0, 1);
  void* q = a.allocate(2 * MiB, 0, 2); // another stream: its own segment
  a.deallocate(p);
  a.deallocate(q);
  CHECK(a.stats(0).reserved_bytes == 40 * MiB);

  SECTION("the retry after freeing the cache succeeds") {
    // Stream 3 cannot reuse the cached segments; the backend is full until they are freed.
    void* r = a.allocate(12 * MiB, 0, 3);
    auto calls = backend.calls();
    REQUIRE(calls.size() == 6);
    CHECK(calls[2].alloc);
    CHECK(calls[2].ptr == nullptr); // refused
    CHECK_FALSE(calls[3].alloc);
    CHECK_FALSE(calls[4].alloc);
    CHECK(calls[5].alloc);
    CHECK(calls[5].nbytes == 12 * MiB);
    auto s = a.stats(0);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.num_ooms == 0);
    CHECK(s.reserved_bytes == 12 * MiB);
    CHECK(s.segments == 1);
    a.deallocate(r);
  }
  SECTION("a block held for another stream is waited for, then freed with the cache") {
    void* used = a.allocate(2 * MiB, 0, 1); // from stream 1's cached segment
    a.record_stream(used, 7);
    a.deallocate(used); // held: its segment cannot be freed yet
    void* r = a.allocate(12 * MiB, 0, 3);
    CHECK(backend.synchronized_events() == 1);
    CHECK(a.stats(0).awaiting_blocks == 0);
    CHECK(a.stats(0).reserved_bytes == 12 * MiB); // both cached segments went back
    a.deallocate(r);
  }
  SECTION("when the retry fails too, the error names the device, the size and the stats") {
    void* held = a.allocate(5 * MiB, 0, 1); // reuses stream 1's cached segment: not freeable
    try {
      (void)a.allocate(25 * MiB, 0, 3);
      FAIL("expected an out-of-memory error");
    } catch (const error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK_THAT(msg, Catch::Contains("CUDA out of memory on device 0"));
      CHECK_THAT(msg, Catch::Contains("Tried to allocate 25.00 MiB"));
      CHECK_THAT(msg, Catch::Contains("a 26.00 MiB segment"));
      CHECK_THAT(msg, Catch::Contains("freed 1 cached segment(s) of 20.00 MiB"));
      CHECK_THAT(msg, Catch::Contains("GPU 0 is fake."));
      CHECK_THAT(msg, Catch::Contains("5.00 MiB is allocated and 15.00 MiB is reserved"));
      CHECK_THAT(msg, Catch::Contains("reserved in all: 20.00 MiB in 1 segment(s)"));
    }
    auto s = a.stats(0);
    CHECK(s.num_ooms == 1);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.allocated_bytes == 5 * MiB);
    // Still usable after the error.
    backend.capacity(100 * MiB);
    void* r = a.allocate(25 * MiB, 0, 3); // the whole 26 MiB segment: 1 MiB is too little to split
    CHECK(a.stats(0).allocated_bytes == 31 * MiB);
    a.deallocate(r);
    a.deallocate(held);
  }
}

TEST_CASE("caching allocator stays consistent under concurrent use", "[core][caching_allocator]") {
  fake_backend backend;
  caching_allocator a(&backend);
  constexpr int kThreads = 4, kIterations = 2000;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(t) + 1);
      std::uniform_int_distribution<size_t> small(1, 256 * KiB), large(1 * MiB + 1, 12 * MiB);
      std::vector<std::pair<void*, size_t>> live;
      const stream_id stream = stream_id(t % 2); // two threads share each stream
      const int device = t % 2 == 0 ? 0 : 1;
      for (int i = 0; i < kIterations; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 3 != 0)) {
          const size_t n = rng() % 10 == 0 ? large(rng) : small(rng);
          void* p = a.allocate(n, device, stream);
          // Mark the first and last bytes: an overlap with another live block shows up.
          as_bytes(p)[0] = char(t);
          as_bytes(p)[n - 1] = char(t);
          live.push_back({p, n});
        } else {
          const size_t k = rng() % live.size();
          auto [p, n] = live[k];
          if (as_bytes(p)[0] != char(t) || as_bytes(p)[n - 1] != char(t))
            ++corrupted;
          a.deallocate(p);
          live.erase(live.begin() + ptrdiff_t(k));
        }
        if (i % 500 == 0)
          a.empty_cache();
      }
      for (auto [p, n] : live)
        a.deallocate(p);
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(corrupted == 0);
  for (int d : {0, 1}) {
    auto s = a.stats(d);
    CHECK(s.allocated_bytes == 0);
    CHECK(s.requested_bytes == 0);
    CHECK(s.active_blocks == 0);
    CHECK(s.num_allocs == s.num_frees);
    CHECK(s.num_allocs > 0);
  }
  // Every segment is one free block again, so empty_cache returns them all.
  for (const auto& seg : a.memory_snapshot())
    CHECK(seg.blocks.size() == 1);
  a.empty_cache();
  CHECK(a.stats(0).reserved_bytes == 0);
  CHECK(a.stats(1).reserved_bytes == 0);
  CHECK(backend.live_segments() == 0);
  CHECK_FALSE(backend.bad_frees());
}

TEST_CASE("caching allocator returns its segments to the backend when destroyed",
          "[core][caching_allocator]") {
  fake_backend backend;
  {
    caching_allocator a(&backend);
    (void)a.allocate(100, 0);         // still allocated
    void* p = a.allocate(3 * MiB, 0); // freed, cached
    a.deallocate(p);
    (void)a.allocate(100, 1, 5);
  }
  CHECK(backend.live_segments() == 0);
  CHECK_FALSE(backend.bad_frees());
}

TEST_CASE("CUDA caching allocator over cudaMalloc", "[core][caching_allocator][cuda]") {
  if (cuda_device_count() == 0) {
    // Without a device, the memory functions say why instead of touching the runtime.
    std::string why;
    try {
      (void)cuda_memory_allocated(0);
    } catch (const error& e) {
      why = e.what();
    }
    WARN("skipped: no CUDA device here: " << why);
    CHECK_THAT(why, ACTORCH_HAVE_CUDA ? Catch::Contains("no CUDA device is available")
                                      : Catch::Contains("built without CUDA"));
    CHECK_THROWS_AS(cuda_allocator(0), error);
    CHECK_NOTHROW(cuda_empty_cache());
    return;
  }
  cuda_empty_cache();
  cuda_reset_peak_memory_stats(0);
  const size_t before = cuda_memory_allocated(0);
  allocator* alloc = cuda_allocator(0);
  CHECK(alloc->device() == actorch::device("cuda:0"));
  void* p = alloc->allocate(3 * MiB);
  CHECK(cuda_memory_allocated(0) == before + 3 * MiB);
  CHECK(cuda_memory_reserved(0) >= 20 * MiB);
  CHECK(cuda_max_memory_allocated(0) == before + 3 * MiB);
  alloc->deallocate(p, 3 * MiB);
  void* q = alloc->allocate(3 * MiB);
  CHECK(q == p); // the cached block
  alloc->deallocate(q, 3 * MiB);
  CHECK(cuda_memory_allocated(0) == before);
  cuda_empty_cache();
  CHECK(cuda_memory_reserved(0) <= cuda_max_memory_reserved(0));
  // A request no GPU can satisfy: the retry, then PyTorch's message with the driver's numbers.
  CHECK_THROWS_WITH(alloc->allocate(size_t(1) << 50),
                    Catch::Contains("CUDA out of memory on device 0") &&
                        Catch::Contains("has a total capacity of"));
  CHECK(cuda_caching_allocator().stats(0).num_ooms >= 1);
  CHECK_THROWS_WITH(cuda_memory_allocated(cuda_device_count()),
                    Catch::Contains("is not a CUDA device"));
}

TEST_CASE("record_stream: memory a side stream still reads is not handed out again",
          "[core][caching_allocator][cuda]") {
  SKIP_WITHOUT_GPU();
  // About 0.1 s of GEMMs queued on a side stream read `x`; x is freed at once on the host.
  const cuda::stream side = cuda::stream::create();
  const tensor a = randn({4096, 4096}, {.device = test::kGPU});
  tensor x = randn({4096, 4096}, {.device = test::kGPU});
  cuda::synchronize();
  side.wait_stream(cuda::current_stream());
  {
    cuda::stream_guard on(side);
    for (int k = 0; k < 40; ++k)
      (void)a.mm(x);
  }
  x.record_stream(side);
  const void* freed = x.data_ptr();
  x = tensor();
  tensor y = empty({4096, 4096}, {.device = test::kGPU});
  CHECK(y.data_ptr() != freed); // the side stream is still reading it
  side.synchronize();
  tensor z = empty({4096, 4096}, {.device = test::kGPU});
  CHECK(z.data_ptr() == freed);
  CHECK_THROWS_WITH(zeros({2}).record_stream(side),
                    Catch::Contains("record_stream: expected a CUDA tensor but got one on cpu"));
}
