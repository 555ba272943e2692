// Note [Shared-memory all-reduce]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Segment: one 512-byte block per rank (arrive counter, done counter, pid, two op headers used
// by alternate ops, the counts of ranks asleep on its counters), two small-op buffers per rank (see
// Note [Small all-reduce]), then a slot of kChunk bytes per rank and a result area of kChunk bytes.
// A tensor larger than kSmall is processed in chunks of at most kChunk bytes; within a chunk, rank
// q owns elements [q*n/N, (q+1)*n/N). For each chunk:
//  1. Copy in: rank r copies the parts of its chunk that the *other* ranks own into its slot
//     (its own part stays in its tensor). On the first chunk it also writes its op header.
//  2. Arrive barrier. Every slot is now full for this chunk; on the first chunk every rank
//     compares all headers and, when they differ, all ranks return "mismatch" together.
//  3. Reduce: rank r folds its part of every rank's data (its own from its tensor, the others'
//     from their slots) in rank order into its tensor, and copies the result into the result
//     area. So every element is reduced in rank order whichever rank owns it, as on the small
//     path and over shared blocks: an all-reduce gives the same bits on every path.
//  4. Done barrier. Every part of the result area is final, and nobody reads the slots any more.
//  5. Copy out: rank r copies the others' parts of the result into its tensor.
// Reusing the buffers for the next chunk is safe: a rank writes its slot again only after the
// done barrier (everybody finished reading slots), and writes the result area only after the
// next arrive barrier (everybody finished copying the previous result out).
// AVG's division runs in step 3 on the reducing rank's part only (`finish`), so each element
// is divided once, not once per rank after the copy out.
// Barriers spin briefly on per-rank counters (spin_budget), then sleep on the counter's futex
// (ranks and their compute threads often outnumber cores, and a waiter that spins or yields
// takes the CPU from them); a rank that passes a counter wakes its sleepers. While asleep, a waiter
// wakes every kSleepSlice to check the deadline and whether the peers' processes still exist.
#include "comm/backend/gloo/shm_collectives.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/cpu_relax.hpp"
#include "base/error.hpp"
#include "comm/host_identity.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace actorch::dist {

namespace {

// ThreadSanitizer sees the barriers' atomics at each rank's own mapping of the segment, so
// between ranks on threads of one process it cannot tell that they order a single-copy read
// of a peer's tensor after the peer's writes and before its next ones. These say so, on the
// tensor's address (Note [Single-copy collectives]).
#if defined(__SANITIZE_THREAD__)
inline void happens_before(const void* at) {
  __tsan_release(const_cast<void*>(at));
}
inline void happens_after(const void* at) {
  __tsan_acquire(const_cast<void*>(at));
}
#else
inline void happens_before(const void*) {}
inline void happens_after(const void*) {}
#endif

constexpr size_t kBlock = 512;        // per-rank control block
constexpr size_t kSmall = 256u << 10; // bytes of each of a rank's two small-op buffers
constexpr size_t kChunk = 4u << 20;   // bytes of each rank's slot
using counter = std::atomic<uint64_t>;
static_assert(counter::is_always_lock_free, "shared-memory counters must be lock-free");

using sleep_count = std::atomic<uint32_t>;
static_assert(sleep_count::is_always_lock_free);
constexpr auto kSleepSlice = std::chrono::milliseconds(50);
// How long a waiter spins before it sleeps. With a CPU for each rank, about one round of a
// pipelined op (a 64 KiB copy and the peer's barrier), so the rounds of an op in progress meet
// without a futex wake-up (tens of microseconds each here; broadcast, reduce and all-reduce of
// 512 KiB to 2 MiB took 1.5-2x as long); a rank far behind costs a waiter no more than that.
// With more ranks than CPUs a spinning waiter holds the CPU the rank it waits for needs
// (world 4 on 2 CPUs ran 2-5x slower spinning that long), so there it barely spins. Past the
// first few microseconds a spinning waiter also yields at each clock read: the scheduler may
// have put the rank it waits for (or its own compute thread) on this CPU, and a pure spin then
// cost a whole budget per barrier (a 512 KiB broadcast took 550 us instead of 55 in one run).
std::chrono::nanoseconds spin_budget(int ranks) {
  static const int cpus = [] {
    cpu_set_t set;
    return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }();
  return ranks <= cpus ? std::chrono::microseconds(50) : std::chrono::microseconds(2);
}
constexpr uint32_t kSpinsPerClockRead = 64;
constexpr uint32_t kPausesBeforeYield = 256;

struct block_view {
  counter* arrive;
  counter* done;
  int32_t* pid;
  uint64_t* probe;       // two: an address in the rank's process and the value it holds there
  int64_t* headers;      // two, alternating by op parity
  sleep_count* sleepers; // two: ranks asleep on `arrive`, on `done`
};

block_view block(void* base, int r) {
  auto* b = static_cast<char*>(base) + kBlock * size_t(r);
  return {reinterpret_cast<counter*>(b),       reinterpret_cast<counter*>(b + 64),
          reinterpret_cast<int32_t*>(b + 128), reinterpret_cast<uint64_t*>(b + 136),
          reinterpret_cast<int64_t*>(b + 192), reinterpret_cast<sleep_count*>(b + 448)};
}

// The futex word of a counter: its low 32 bits (x86-64 and aarch64 are little-endian), which
// change whenever the counter does, short of 2^32 barriers between two looks.
uint32_t* futex_word(counter* c) {
  static_assert(std::endian::native == std::endian::little);
  return reinterpret_cast<uint32_t*>(c);
}

// Sleeps while *word == expected, at most `slice`; shared (not PRIVATE): the word lives in a
// segment other processes map.
void futex_wait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds slice) {
  timespec ts{time_t(slice.count() / 1000000000), long(slice.count() % 1000000000)};
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int64_t* header_of(void* base, int r, uint64_t parity) {
  return block(base, r).headers + parity * shm_collectives::header_len;
}

char* small_buffer(void* base, int size, int r, uint64_t parity) {
  return static_cast<char*>(base) + kBlock * size_t(size) + kSmall * (2 * size_t(r) + parity);
}

char* slot(void* base, int size, int r) {
  return static_cast<char*>(base) + (kBlock + 2 * kSmall) * size_t(size) + kChunk * size_t(r);
}

char* result_area(void* base, int size) {
  return slot(base, size, size);
}

// memcpy that accepts empty ranges with null pointers (a header-only exchange has no data).
void copy(void* dst, const void* src, size_t n) {
  if (n != 0)
    std::memcpy(dst, src, n);
}

// A new POSIX shared-memory object of `bytes`, mapped, under a name unique to this process
// ("/actorch_<pid>_<random><suffix>"); posix_fallocate reserves its pages, so a full /dev/shm
// fails here, not with SIGBUS later. MAP_FAILED (`name` empty, `why` saying which step failed
// and the system's reason) when it cannot be made.
void* create_segment(std::string& name, size_t bytes, std::string& why,
                     const std::string& suffix = "") {
  std::random_device rd;
  name = "/actorch_" + std::to_string(::getpid()) + "_" + std::to_string(rd()) + suffix;
  void* base = MAP_FAILED;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    why = "shm_open: " + errno_str(errno);
  } else if (::ftruncate(fd, off_t(bytes)) != 0) {
    why = "ftruncate: " + errno_str(errno);
  } else if (const int rc = ::posix_fallocate(fd, 0, off_t(bytes)); rc != 0) {
    why = "reserving " + std::to_string(bytes >> 20) + " MiB in /dev/shm: " + errno_str(rc) +
          (rc == ENOSPC ? " (/dev/shm is full or too small)" : "");
  } else {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
      why = "mmap: " + errno_str(errno);
  }
  if (fd >= 0)
    ::close(fd);
  if (base == MAP_FAILED) {
    if (fd >= 0)
      ::shm_unlink(name.c_str());
    name.clear();
  }
  return base;
}

// Another process's segment `name` (empty: none), mapped; MAP_FAILED (`why` saying why) when it
// cannot be.
void* map_segment(const std::string& name, size_t bytes, std::string& why) {
  if (name.empty()) {
    why = "rank 0 could not make one";
    return MAP_FAILED;
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    why = "shm_open('" + name + "'): " + errno_str(errno);
    return MAP_FAILED;
  }
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) < bytes)
    why = "'" + name + "' holds " + std::to_string(st.st_size) + " bytes, not the " +
          std::to_string(bytes) + " rank 0 makes";
  else if (base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
           base == MAP_FAILED)
    why = "mmap('" + name + "'): " + errno_str(errno);
  ::close(fd);
  return base;
}

// Whether every rank published `mine`: each rank sets it under prefix + its rank and reads the
// others'. A collective over the store.
bool all_same(store& st, const std::string& prefix, int rank, int size, const std::string& mine,
              milliseconds timeout) {
  st.set(prefix + std::to_string(rank), mine);
  bool all = true;
  for (int q = 0; q < size; ++q) {
    st.wait({prefix + std::to_string(q)}, timeout);
    all = all && st.get(prefix + std::to_string(q)) == mine;
  }
  return all;
}

// Whether `mine` holds on every rank (all_same over "1" and "0").
bool all_ranks(store& st, const std::string& prefix, int rank, int size, bool mine,
               milliseconds timeout) {
  return all_same(st, prefix, rank, size, mine ? "1" : "0", timeout) && mine;
}

// A word of this process that other ranks read to learn whether they may (Note [Single-copy
// collectives]): random, so that a process which merely has the same pid in another pid
// namespace, or the same binary's layout, fails the check.
const uint64_t& probe_word() {
  static const uint64_t word = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32 | rd()) | 1;
  }();
  return word;
}

// Whether this process can read the word at `address` in process `pid` and finds `want` there.
bool can_read(int32_t pid, uint64_t address, uint64_t want) {
  if (pid == int32_t(::getpid()))
    return true;
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == ssize_t(sizeof got) && got == want;
}

} // namespace

// Note [Shared segment checks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The segment's name travels through the store, where anyone who reaches an open store (one
// without a job secret) can plant another before rank 0 writes it: the other ranks would then
// map the planter's segment, or none. So, after every rank has mapped what it was given and
// written its pid into its own block there, each rank checks that every block of its mapping
// holds a pid: ranks that mapped different segments find the others' blocks empty. The ranks
// agree on the outcome, and whenever the shared-memory path is not taken for a reason other
// than the ranks being on several hosts, each rank that saw why logs it: all_reduce then runs
// over TCP, several times slower, and the log is the only place that says so.
std::unique_ptr<shm_collectives> shm_collectives::connect(store& st, int rank, int size,
                                                          milliseconds timeout,
                                                          const std::string& who,
                                                          bool single_copy) {
  const size_t bytes = (kBlock + 2 * kSmall) * size_t(size) + kChunk * size_t(size + 1);
  // Round 1: same host?
  if (!all_same(st, "shm/host/", rank, size, host_id(), timeout) || size < 2)
    return nullptr;
  const auto fall_back = [&](const std::string& why) {
    std::fprintf(stderr,
                 "process_group_gloo: %s: collectives do not use shared memory (%s); they run "
                 "over TCP instead, several times slower\n",
                 who.c_str(), why.c_str());
  };
  // Round 2: rank 0 creates the segment, everyone maps it and reports.
  std::string name, why;
  void* base = MAP_FAILED;
  if (rank == 0) {
    base = create_segment(name, bytes, why);
    st.set("shm/name", name);
    if (base == MAP_FAILED)
      why = "cannot make the shared segment: " + why;
  } else {
    st.wait({"shm/name"}, timeout);
    name = st.get("shm/name");
    base = map_segment(name, bytes, why);
    if (base == MAP_FAILED)
      why = "cannot map the shared segment rank 0 named (its key shm/name): " + why;
  }
  if (base != MAP_FAILED) {
    const block_view mine = block(base, rank);
    *mine.pid = int32_t(::getpid());
    mine.probe[0] = reinterpret_cast<uintptr_t>(&probe_word());
    mine.probe[1] = probe_word();
  }
  bool ok = all_ranks(st, "shm/ok/", rank, size, base != MAP_FAILED, timeout);
  if (rank == 0 && !name.empty())
    ::shm_unlink(name.c_str()); // mapped everywhere now; nothing is left behind on a crash
  // Round 3: one segment for all? See Note [Shared segment checks].
  if (ok) {
    for (int q = 0; q < size && why.empty(); ++q)
      if (*block(base, q).pid == 0)
        why = "rank " + std::to_string(q) + " mapped another segment than this rank did ('" + name +
              "' from the key shm/name, which someone else may have written: a job " +
              "secret, ACTORCH_JOB_TOKEN, keeps strangers out of the store)";
    ok = all_ranks(st, "shm/verified/", rank, size, why.empty(), timeout);
  }
  if (!ok) {
    if (!why.empty())
      fall_back(why);
    else if (rank == 0)
      fall_back("another rank could not map or verify the shared segment; its log says why");
    if (base != MAP_FAILED)
      ::munmap(base, bytes);
    return nullptr;
  }
  // Round 4: may every rank read every other's memory? See Note [Single-copy collectives].
  bool readable = single_copy;
  for (int q = 0; q < size && readable; ++q) {
    const block_view b = block(base, q);
    readable = q == rank || can_read(*b.pid, b.probe[0], b.probe[1]);
  }
  auto shm =
      std::unique_ptr<shm_collectives>(new shm_collectives(rank, size, timeout, base, bytes));
  shm->single_copy_ = all_ranks(st, "shm/direct/", rank, size, readable, timeout);
  return shm;
}

shm_collectives::shm_collectives(int rank, int size, milliseconds timeout, void* base, size_t bytes)
    : rank_(rank), size_(size), timeout_(timeout), base_(base), bytes_(bytes) {}

shm_collectives::~shm_collectives() {
  ::munmap(base_, bytes_);
}

namespace {

// One rank's side of a barrier: its counter, the count of ranks asleep on it, its pid.
struct signal_words {
  counter* count;
  sleep_count* sleepers;
  const int32_t* pid;
};

// Sets this rank's counter to `epoch` (waking its sleepers), then waits until every rank's
// counter (words(q)) has reached it: spinning briefly, then asleep on the counter's futex in
// slices, between which it checks the deadline and whether the rank's process still exists.
// `what` names the operation in the errors.
template <class Words>
void pass_barrier(const Words& words, int rank, int size, uint64_t epoch, milliseconds timeout,
                  const char* what) {
  const signal_words mine = words(rank);
  // seq_cst on both sides (this store and the sleepers load; a sleeper's increment and its
  // counter load): either this rank sees the sleeper, or the sleeper sees the new epoch.
  mine.count->store(epoch, std::memory_order_seq_cst);
  if (mine.sleepers->load(std::memory_order_seq_cst) != 0)
    futex_wake_all(futex_word(mine.count));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int32_t self = int32_t(::getpid());
  for (int q = 0; q < size; ++q) {
    const signal_words w = words(q);
    counter* c = w.count;
    std::chrono::steady_clock::time_point spin_until{};
    bool spinning = true;
    for (uint32_t spins = 0; c->load(std::memory_order_acquire) < epoch; ++spins) {
      if (spinning) {
        cpu_relax();
        if (spins % kSpinsPerClockRead == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (spins == 0)
            spin_until = now + spin_budget(size);
          else if (now > spin_until)
            spinning = false;
          else if (spins >= kPausesBeforeYield)
            ::sched_yield(); // the rank waited for may be queued on this CPU
        }
        continue;
      }
      w.sleepers->fetch_add(1, std::memory_order_seq_cst);
      const uint64_t seen = c->load(std::memory_order_seq_cst);
      if (seen < epoch)
        futex_wait(futex_word(c), uint32_t(seen), kSleepSlice);
      w.sleepers->fetch_sub(1, std::memory_order_seq_cst);
      if (c->load(std::memory_order_acquire) >= epoch)
        break;
      const int32_t pid = *w.pid;
      if (pid != self && process_exited(pid_t(pid)))
        throw std::runtime_error("rank " + std::to_string(q) + " (pid " + std::to_string(pid) +
                                 ") has exited, found while waiting for it at a " + what);
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("rank " + std::to_string(q) + " did not arrive in the " + what +
                                 " within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

} // namespace

void shm_collectives::barrier(size_t which, uint64_t epoch) {
  pass_barrier(
      [&](int q) {
        auto b = block(base_, q);
        return signal_words{which == 0 ? b.arrive : b.done, &b.sleepers[which], b.pid};
      },
      rank_, size_, epoch, timeout_, "shared-memory collective's barrier");
}

bool shm_collectives::run(void* data, size_t count, size_t elem_size, reduce_fn fn,
                          const int64_t* header, std::vector<int64_t>& all_headers,
                          finish_fn finish, int64_t divisor) {
  const uint64_t parity = ops_++ & 1;
  if (count * elem_size <= kSmall)
    return run_small(data, count, elem_size, fn, header, all_headers, parity, finish, divisor);
  const size_t n_size = size_t(size_);
  const size_t per_chunk = kChunk / elem_size;
  auto* bytes = static_cast<char*>(data);
  size_t done_elems = 0;
  bool first = true;
  while (first || done_elems < count) {
    const size_t n = std::min(per_chunk, count - done_elems);
    char* chunk = bytes + done_elems * elem_size;
    auto part = [&](size_t q) { return std::pair{q * n / n_size, (q + 1) * n / n_size}; };
    // 1. Copy in the parts the others own.
    char* mine = slot(base_, size_, rank_);
    for (size_t q = 0; q < n_size; ++q) {
      if (int(q) == rank_)
        continue;
      auto [b, e] = part(q);
      copy(mine + b * elem_size, chunk + b * elem_size, (e - b) * elem_size);
    }
    if (first)
      std::memcpy(header_of(base_, rank_, parity), header, header_len * sizeof(int64_t));
    // 2. Everyone's slot is full.
    const uint64_t epoch = ++epoch_;
    barrier(0, epoch);
    if (first) {
      if (!same_headers(parity, all_headers))
        return false; // Note [Header mismatches]
      first = false;
    }
    // 3. Reduce my part in rank order, in my tensor (ranks 0 and 1 from the start; a later
    //    rank folds ranks 0 .. r-1 in the result area first), and publish it.
    auto [b, e] = part(size_t(rank_));
    char* out = chunk + b * elem_size;
    char* result = result_area(base_, size_) + b * elem_size;
    const auto source = [&](int q) -> const char* {
      return q == rank_ ? out : slot(base_, size_, q) + b * elem_size;
    };
    if (e > b) {
      const size_t m = e - b;
      if (rank_ <= 1) {
        fn(out, source(0), source(1), m);
      } else {
        fn(result, source(0), source(1), m);
        for (int q = 2; q < rank_; ++q)
          fn(result, result, source(q), m);
        fn(out, result, out, m);
      }
      for (int q = std::max(2, rank_ + 1); q < size_; ++q)
        fn(out, out, source(q), m);
      if (finish != nullptr)
        finish(out, m, divisor);
      copy(result, out, m * elem_size);
    }
    // 4. Every part of the result is final.
    barrier(1, epoch);
    // 5. Copy the others' parts out.
    for (size_t q = 0; q < n_size; ++q) {
      if (int(q) == rank_)
        continue;
      auto [qb, qe] = part(q);
      copy(chunk + qb * elem_size, result_area(base_, size_) + qb * elem_size,
           (qe - qb) * elem_size);
    }
    done_elems += n;
  }
  return true;
}

// Note [Header mismatches]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Ranks whose headers differ may be in different ops, or in one op at different sizes, and so
// on different paths through the segment (one barrier or two per round, one round or many).
// What they share is the first arrive barrier, after which each compares the headers: on a
// mismatch every rank returns there, with nothing read or written beyond its own header and
// slot. No done barrier follows (a rank on the one-barrier path would never arrive at it); the
// counters hold epochs, not counts, so a skipped done barrier leaves nothing out of step. The
// next op's writes are safe as ever: a rank writes its header of the same parity, or its slot,
// only after passing the next op's arrive barrier, which every rank reaches after its compare.
bool shm_collectives::same_headers(uint64_t parity, std::vector<int64_t>& all_headers) const {
  bool same = true;
  for (int q = 1; q < size_; ++q)
    same = same && std::memcmp(header_of(base_, q, parity), header_of(base_, 0, parity),
                               header_len * sizeof(int64_t)) == 0;
  if (!same) {
    all_headers.clear();
    for (int q = 0; q < size_; ++q)
      all_headers.insert(all_headers.end(), header_of(base_, q, parity),
                         header_of(base_, q, parity) + header_len);
  }
  return same;
}

// Note [Small all-reduce]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Up to kSmall bytes, one barrier per op. Each rank copies its whole
// tensor (and header) into its buffer of this op's parity, arrives, then reduces every rank's
// buffer itself, in rank order (so every rank computes the same bits). A rank writes a buffer
// of the same parity again two ops later, after the next op's barrier, which nobody passes
// before finishing its reads of this op: no second barrier is needed.
bool shm_collectives::run_small(void* data, size_t count, size_t elem_size, reduce_fn fn,
                                const int64_t* header, std::vector<int64_t>& all_headers,
                                uint64_t parity, finish_fn finish, int64_t divisor) {
  const size_t nbytes = count * elem_size;
  copy(small_buffer(base_, size_, rank_, parity), data, nbytes);
  std::memcpy(header_of(base_, rank_, parity), header, header_len * sizeof(int64_t));
  barrier(0, ++epoch_);
  if (!same_headers(parity, all_headers))
    return false;
  if (count == 0)
    return true;
  copy(data, small_buffer(base_, size_, 0, parity), nbytes);
  for (int q = 1; q < size_; ++q)
    fn(data, data, small_buffer(base_, size_, q, parity), count);
  if (finish != nullptr)
    finish(data, count, divisor);
  return true;
}

} // namespace actorch::dist

namespace actorch::dist {

// Note [Shared buffers]
// ~~~~~~~~~~~~~~~~~~~~~
// A gradient bucket all-reduced through the segment above is copied in (the parts others own),
// reduced, published and copied out: per rank about four passes over the bucket besides the
// reduction. When the bucket itself lives in memory every rank maps (allocate: each rank
// creates a POSIX shared-memory object of its own, publishes its name through the store, maps
// every rank's, and unlinks its own once all have mapped it), run_shared needs none of it:
//  1. Every rank writes its op header and arrives (its block holds its input).
//  2. Rank r reduces its part [r*n/N, (r+1)*n/N) of every block in rank order, chunk by
//     chunk: block 0's part accumulates block 1's, block 2's..., is finished (AVG), and is
//     copied into the same part of the other blocks. Nobody else touches part r meanwhile.
//  3. Done barrier: every part of every block holds the result.
// Per rank that is one read and one write of the bucket in all, and every element is summed
// in rank order. A block is unmapped when the last tensor using it dies.
size_t shm_collectives::small_bytes() {
  return kSmall;
}

namespace {

// A shared block's signals (its barrier's words) after its bytes, on their own cache lines.
constexpr size_t kSignals = 256;

size_t signals_offset(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

} // namespace

shm_collectives::shared_block::~shared_block() {
  for (char* b : base)
    if (b != nullptr)
      ::munmap(b, signals_offset(bytes) + kSignals);
}

void shm_collectives::shared_block::barrier() {
  const size_t at = signals_offset(bytes);
  pass_barrier(
      [&](int q) {
        char* s = base[size_t(q)] + at;
        return signal_words{reinterpret_cast<counter*>(s), reinterpret_cast<sleep_count*>(s + 64),
                            reinterpret_cast<const int32_t*>(s + 128)};
      },
      rank, int(base.size()), ++epoch, timeout, "barrier over shared memory");
}

std::shared_ptr<shm_collectives::shared_block> shm_collectives::allocate(store& st, size_t bytes) {
  std::lock_guard lock(alloc_mu_);
  auto block = std::make_shared<shared_block>();
  block->id = allocations_++;
  block->bytes = bytes;
  block->base.assign(size_t(size_), nullptr);
  block->rank = rank_;
  block->timeout = timeout_;
  const std::string prefix = "shm/block/" + std::to_string(block->id) + "/";
  const size_t mapped = signals_offset(bytes) + kSignals;
  std::string name, why;
  void* mine = create_segment(name, mapped, why, "_" + std::to_string(block->id));
  bool all = mine != MAP_FAILED;
  if (all) {
    block->base[size_t(rank_)] = static_cast<char*>(mine);
    *reinterpret_cast<int32_t*>(block->base[size_t(rank_)] + signals_offset(bytes) + 128) =
        int32_t(::getpid());
  }
  st.set(prefix + "name/" + std::to_string(rank_), name);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_)
      continue;
    const std::string key = prefix + "name/" + std::to_string(q);
    st.wait({key}, timeout_);
    std::string peer_why;
    void* peer = map_segment(st.get(key), mapped, peer_why);
    if (peer == MAP_FAILED && why.empty())
      why = "cannot map rank " + std::to_string(q) + "'s: " + peer_why;
    all = all && peer != MAP_FAILED;
    if (peer != MAP_FAILED)
      block->base[size_t(q)] = static_cast<char*>(peer);
  }
  all = all_ranks(st, prefix + "ok/", rank_, size_, all, timeout_);
  if (!name.empty())
    ::shm_unlink(name.c_str()); // mapped everywhere (or given up): nothing left behind
  if (!why.empty())             // See Note [Shared segment checks]
    std::fprintf(stderr,
                 "process_group_gloo: rank %d: a shared block of %zu bytes cannot be made (%s); "
                 "its tensor is an ordinary one\n",
                 rank_, bytes, why.c_str());
  return all ? block : nullptr;
}

bool shm_collectives::run_shared(const shared_block& block, size_t count, size_t elem_size,
                                 reduce_fn fn, const int64_t* header,
                                 std::vector<int64_t>& all_headers, finish_fn finish,
                                 int64_t divisor) {
  const uint64_t parity = ops_++ & 1;
  std::memcpy(header_of(base_, rank_, parity), header, header_len * sizeof(int64_t));
  const uint64_t epoch = ++epoch_;
  barrier(0, epoch);
  if (!same_headers(parity, all_headers))
    return false;                     // Note [Header mismatches]
  constexpr size_t kStep = 64u << 10; // bytes per chunk: N of them stay in cache
  const size_t n_size = size_t(size_);
  const size_t begin = size_t(rank_) * count / n_size, end = size_t(rank_ + 1) * count / n_size;
  const size_t step = std::max<size_t>(1, kStep / elem_size);
  for (size_t c = begin; c < end; c += step) {
    const size_t n = std::min(step, end - c);
    char* acc = block.base[0] + c * elem_size;
    for (size_t q = 1; q < n_size; ++q)
      fn(acc, acc, block.base[q] + c * elem_size, n);
    if (finish != nullptr)
      finish(acc, n, divisor);
    for (size_t q = 1; q < n_size; ++q)
      std::memcpy(block.base[q] + c * elem_size, acc, n * elem_size);
  }
  barrier(1, epoch);
  return true;
}

} // namespace actorch::dist

namespace actorch::dist {

// Note [Staged collectives]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Every collective other than the all-reduce moves bytes from some ranks to others, unchanged
// or reduced on arrival. Through the segment each is a number of rounds; in a round every
// rank copies what others will need into the staging areas (its own, or for scatter the
// receiver's), arrives, copies or reduces what it needs out of the others' areas straight into
// its outputs, and is done. A payload up to the small-op buffer's size per area is one round
// on the small buffers of the op's parity with no done barrier (Note [Small all-reduce]'s
// argument holds for any rank writing any buffer); a larger one goes in rounds through the
// slots, kChunk bytes per area, a done barrier closing each round before the next one's copies
// overwrite the areas (one-sided ops overlap their rounds instead: Note [Pipelined rounds]).
// The op header rides in the first round (Note [Header mismatches]).
// Per rank, each byte is written once into the segment and read once by each rank that needs
// it: no TCP, no kernel, no intermediate buffer beyond the staging area.
shm_collectives::plan shm_collectives::plan_of(size_t bytes, size_t pieces, bool pipelined) {
  const size_t line = pieces == 1 ? 1 : 64; // pieces start on cache lines
  const size_t padded = (bytes + line - 1) / line * line;
  if (padded * pieces <= kSmall)
    return {true, false, padded, 1};
  if (pipelined) { // rounds enough to overlap the two sides (about 8), of 64 KiB at least
    const size_t piece = std::clamp<size_t>((bytes / 8 + 63) / 64 * 64, 64u << 10, kChunk / 2);
    return {false, true, piece, (bytes + piece - 1) / piece};
  }
  const size_t piece = kChunk / pieces / line * line;
  return {false, false, piece, (bytes + piece - 1) / piece};
}

// Note [Pipelined rounds]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Where one side only writes and the other only reads (broadcast, scatter: the root stages and
// the others collect; gather, reduce: the other way round), a round's two halves leave each side
// idle half the time. Pipelined, each area is two halves used by alternate rounds, and one barrier
// ends each step: step 0 stages round 0 (and its barrier carries the header check); in step k
// the writers stage round k into halves k % 2 while the readers collect round k - 1 from the
// other halves, and the barrier after it means round k is staged and round k - 1 read. A
// writer stages round k + 1 into the halves round k - 1 used only after that barrier. The last
// step only collects, and its barrier keeps the next op from writing areas a rank still reads.
bool shm_collectives::exchange(const int64_t* header, std::vector<int64_t>& all_headers,
                               const plan& p, const round_fn& stage, const round_fn& collect) {
  const uint64_t parity = ops_++ & 1;
  staging halves[2];
  for (int h = 0; h < 2; ++h) {
    halves[h].capacity = p.small ? kSmall : p.pipelined ? kChunk / 2 : kChunk;
    for (int q = 0; q < size_; ++q)
      halves[h].areas.push_back(p.small ? small_buffer(base_, size_, q, parity)
                                        : slot(base_, size_, q) + h * halves[h].capacity);
  }
  std::memcpy(header_of(base_, rank_, parity), header, header_len * sizeof(int64_t));
  if (p.pipelined) {
    stage(0, halves[0]);
    barrier(0, ++epoch_);
    if (!same_headers(parity, all_headers))
      return false; // Note [Header mismatches]
    for (size_t k = 1; k <= p.rounds; ++k) {
      if (k < p.rounds)
        stage(k, halves[k % 2]);
      collect(k - 1, halves[(k - 1) % 2]);
      barrier(0, ++epoch_);
    }
    return true;
  }
  for (size_t k = 0; k < p.rounds; ++k) {
    stage(k, halves[0]);
    const uint64_t epoch = ++epoch_;
    barrier(0, epoch);
    if (k == 0 && !same_headers(parity, all_headers))
      return false; // Note [Header mismatches]
    collect(k, halves[0]);
    if (!p.small)
      barrier(1, epoch);
  }
  return true;
}

// The mechanism of Note [Single-copy collectives] (shm_staged.cpp): the op's header and this
// rank's addresses go into its small buffer of the op's parity (no other op of that parity can
// be running: the one before it ended with a done barrier, or, on the small path, is followed
// by an op of the other parity whose arrive barrier every rank passed), an arrive barrier makes
// every table visible, each rank copies what it needs, and the done barrier keeps every rank's
// tensors in place until nobody reads them.
bool shm_collectives::direct(const int64_t* header, std::vector<int64_t>& all_headers,
                             const std::vector<const char*>& mine, const read_fn& read) {
  const uint64_t parity = ops_++ & 1;
  std::memcpy(header_of(base_, rank_, parity), header, header_len * sizeof(int64_t));
  auto* own = reinterpret_cast<uint64_t*>(small_buffer(base_, size_, rank_, parity));
  for (size_t j = 0; j < mine.size(); ++j) {
    own[j] = reinterpret_cast<uintptr_t>(mine[j]);
    happens_before(mine[j]); // this rank's writes, before the others read
  }
  const uint64_t epoch = ++epoch_;
  barrier(0, epoch);
  if (!same_headers(parity, all_headers))
    return false; // Note [Header mismatches]
  std::vector<table> tables;
  for (int q = 0; q < size_; ++q)
    tables.push_back(reinterpret_cast<table>(small_buffer(base_, size_, q, parity)));
  read(tables);
  barrier(1, epoch);
  for (const char* p : mine)
    happens_after(p); // the others' reads, before this rank writes again
  return true;
}

void shm_collectives::read_from(int q, char* to, uint64_t from, size_t n) const {
  const int32_t pid = *block(base_, q).pid;
  if (pid == int32_t(::getpid())) { // ranks on threads of this process
    const auto* src = reinterpret_cast<const char*>(from);
    happens_after(src);
    if (n != 0 && to != src)
      std::memmove(to, src, n);
    happens_before(src);
    return;
  }
  while (n > 0) {
    iovec local{to, n};
    iovec remote{reinterpret_cast<void*>(from), n};
    const ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) {
      const int e = errno;
      throw std::runtime_error("rank " + std::to_string(q) + " (pid " + std::to_string(pid) +
                               "): reading " + std::to_string(n) + " bytes of its tensor failed: " +
                               (got == 0 ? std::string("nothing read") : errno_str(e)) +
                               (got < 0 && e == ESRCH ? " (its process is gone)" : ""));
    }
    to += got;
    from += uint64_t(got);
    n -= size_t(got);
  }
}

} // namespace actorch::dist
