// The staged collectives of shm_collectives: every collective but the all-reduce, as rounds of
// copies through the shared segment (Note [Staged collectives] in shm_collectives.cpp); a
// middle-sized broadcast as one copy straight out of the root's tensor (Note [Single-copy
// collectives]).
#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "comm/backend/gloo/shm_collectives.hpp"

namespace actorch::dist {

namespace {

// Note [Single-copy collectives]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The largest broadcast read straight from the root's tensor.
constexpr size_t kSingleCopyMax = size_t(2) << 20;
// Note [Streaming copies]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The least output of an op written past the caches, and of an
// all_to_all.
constexpr size_t kStreamMin = size_t(16) << 20;
constexpr size_t kStreamMinAllToAll = size_t(8) << 20;

// The bytes of a `total`-byte payload that round k carries, `per_round` bytes a round.
size_t round_bytes(size_t total, size_t k, size_t per_round) {
  const size_t at = k * per_round;
  return at >= total ? 0 : std::min(per_round, total - at);
}

// memmove that accepts empty ranges and skips a copy onto itself (an in-place gather's own part).
void move(void* dst, const void* src, size_t n) {
  if (n != 0 && dst != src)
    std::memmove(dst, src, n);
}

// Note [Streaming copies]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A collective's output beyond the caches is written with streaming (non-temporal) stores.
// An ordinary store first reads the line it writes (read for ownership), so a large copy out of
// the staging areas (which are in the cache: a round's areas hold 4 MiB) moved each output byte
// through memory twice; streamed, once. Below kStreamMin output bytes per op the output may
// still be read from the cache by whoever runs next, and an 8 MiB all_gather measured slower
// streamed. At 32 and 64 MiB, medians of two interleaved runs: all_gather 1.1-1.6x faster,
// all_to_all 1.2-1.5x, broadcast 1.0-1.4x (docs/performance.md). An all_to_all streams from
// kStreamMinAllToAll: at world 4 its 8 MiB output measured faster streamed in 10 of 13
// interleaved rounds (median 3.2 against 5.2 ms; under 3% slower in the other three), and
// level at world 2.

// memmove whose stores bypass the caches (no read for ownership of the destination's lines).
void stream(void* dst, const void* src, size_t n) {
  if (n == 0 || dst == src)
    return;
#if defined(__x86_64__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d < s + n && s < d + n) { // overlapping: no streaming
    std::memmove(d, s, n);
    return;
  }
  const size_t head = std::min(n, (16 - (uintptr_t(d) & 15)) & 15);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
  _mm_sfence();
#else
  std::memmove(dst, src, n);
#endif
}

} // namespace

// Note [Single-copy collectives]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Staged, every byte is copied twice, into the segment and out of it, in rounds that each end
// at a barrier. A rank that can read its peers' memory can copy each byte once, from the
// sender's tensor straight into its output: each rank publishes the addresses of what it sends,
// all arrive, each reads what it needs (process_vm_readv, the kernel's copy between two
// processes; memmove for ranks on threads of one process), all are done: two barriers per op.
// Whether every rank may read every other's memory is decided once, at connect, by reading a
// probe word in each peer's process: ptrace policy (Yama's ptrace_scope, a container's seccomp
// profile, a non-dumpable process) can forbid it, and then every op stays staged.
// The kernel's copy is the catch: on this machine it moves 5 GB/s against memcpy's 11 at 64 MiB
// (11 against 48 within the cache), so one copy through it takes as long as two of ours, and
// staged rounds keep both cores copying where it keeps one. Measured op by op (docs/
// performance.md), it paid only where the barriers cost more than the bytes: broadcast beyond
// the small buffers and up to kSingleCopyMax, where the root writes and waits while the
// readers wake round after round (at world 4 on 2 CPUs, 512 KiB took 160-300 us against
// 240-400 staged). all_gather and all_to_all were level or slower at every size, and at 8 MiB
// broadcast too, so they stay staged.

bool shm_collectives::all_gather(const int64_t* header, std::vector<int64_t>& all_headers,
                                 const char* in, size_t bytes, const std::vector<char*>& outs) {
  return gather(header, all_headers, -1, in, bytes, outs);
}

bool shm_collectives::gather(const int64_t* header, std::vector<int64_t>& all_headers, int root,
                             const char* in, size_t bytes, const std::vector<char*>& outs) {
  // root -1: every rank gathers (all_gather), in plain rounds; one root: pipelined.
  const bool everyone = root < 0;
  const plan p = plan_of(bytes, 1, !everyone);
  const auto stage = [&](size_t k, const staging& s) {
    if (rank_ != root)
      move(s.areas[size_t(rank_)], in + k * p.piece, round_bytes(bytes, k, p.piece));
  };
  const auto put = bytes * size_t(size_) >= kStreamMin ? stream : move;
  const auto collect = [&](size_t k, const staging& s) {
    if (!everyone && rank_ != root)
      return;
    const size_t n = round_bytes(bytes, k, p.piece);
    for (int q = 0; q < size_; ++q)
      put(outs[size_t(q)] + k * p.piece, q == rank_ ? in + k * p.piece : s.areas[size_t(q)], n);
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::broadcast(const int64_t* header, std::vector<int64_t>& all_headers, int root,
                                char* data, size_t bytes) {
  const plan p = plan_of(bytes, 1, true);
  if (single_copy_ && !p.small && bytes <= kSingleCopyMax)
    return direct(header, all_headers, {data}, [&](const std::vector<table>& from) {
      if (rank_ != root)
        read_from(root, data, from[size_t(root)][0], bytes);
    });
  const auto stage = [&](size_t k, const staging& s) {
    if (rank_ == root)
      move(s.areas[size_t(root)], data + k * p.piece, round_bytes(bytes, k, p.piece));
  };
  const auto put = bytes >= kStreamMin ? stream : move;
  const auto collect = [&](size_t k, const staging& s) {
    if (rank_ != root)
      put(data + k * p.piece, s.areas[size_t(root)], round_bytes(bytes, k, p.piece));
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::scatter(const int64_t* header, std::vector<int64_t>& all_headers, int root,
                              const std::vector<const char*>& ins, char* out, size_t bytes) {
  const plan p = plan_of(bytes, 1, true);
  // The root writes each rank's piece into that rank's own area.
  const auto stage = [&](size_t k, const staging& s) {
    if (rank_ != root)
      return;
    for (int q = 0; q < size_; ++q)
      if (q != root)
        move(s.areas[size_t(q)], ins[size_t(q)] + k * p.piece, round_bytes(bytes, k, p.piece));
  };
  const auto collect = [&](size_t k, const staging& s) {
    const char* from = rank_ == root ? ins[size_t(root)] + k * p.piece : s.areas[size_t(rank_)];
    move(out + k * p.piece, from, round_bytes(bytes, k, p.piece));
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::reduce(const int64_t* header, std::vector<int64_t>& all_headers, int root,
                             const char* in, char* out, size_t count, size_t elem_size,
                             reduce_fn fn, finish_fn finish, int64_t divisor) {
  const size_t bytes = count * elem_size;
  const plan p = plan_of(bytes, 1, true); // pieces are whole elements: kChunk is a multiple of 64
  const size_t piece = p.piece;
  const auto stage = [&](size_t k, const staging& s) {
    if (rank_ != root)
      move(s.areas[size_t(rank_)], in + k * piece, round_bytes(bytes, k, piece));
  };
  // The root folds the others' parts into its own, in rank order after its own.
  const auto collect = [&](size_t k, const staging& s) {
    const size_t n = round_bytes(bytes, k, piece) / elem_size;
    if (rank_ != root || n == 0)
      return;
    char* acc = out + k * piece;
    const char* first = in + k * piece;
    for (int q = 0; q < size_; ++q) {
      if (q == root)
        continue;
      fn(acc, first, s.areas[size_t(q)], n);
      first = acc;
    }
    if (finish != nullptr)
      finish(acc, n, divisor);
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::reduce_scatter(const int64_t* header, std::vector<int64_t>& all_headers,
                                     const std::vector<const char*>& ins, char* out, size_t count,
                                     size_t elem_size, reduce_fn fn, finish_fn finish,
                                     int64_t divisor) {
  // Each rank stages the piece for rank q at q * piece of its own area; rank r reduces its own
  // input's part with the pieces every other rank staged for it.
  const size_t bytes = count * elem_size;
  const plan p = plan_of(bytes, size_t(size_)); // pieces of whole elements (64-byte multiples)
  const size_t piece = p.piece;
  const auto stage = [&](size_t k, const staging& s) {
    const size_t n = round_bytes(bytes, k, piece);
    for (int q = 0; q < size_; ++q)
      if (q != rank_)
        move(s.areas[size_t(rank_)] + size_t(q) * piece, ins[size_t(q)] + k * piece, n);
  };
  const auto collect = [&](size_t k, const staging& s) {
    const size_t n = round_bytes(bytes, k, piece) / elem_size;
    if (n == 0)
      return;
    char* acc = out + k * piece;
    const char* first = ins[size_t(rank_)] + k * piece;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_)
        continue;
      fn(acc, first, s.areas[size_t(q)] + size_t(rank_) * piece, n);
      first = acc;
    }
    if (finish != nullptr)
      finish(acc, n, divisor);
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::all_to_all(const int64_t* header, std::vector<int64_t>& all_headers,
                                 const std::vector<const char*>& sends,
                                 const std::vector<size_t>& send_bytes,
                                 const std::vector<char*>& recvs,
                                 const std::vector<size_t>& recv_bytes, size_t max_pair_bytes) {
  // Rank r stages its piece for rank j at j * piece of its own area; rank j reads it there.
  const plan p = plan_of(max_pair_bytes, size_t(size_));
  const auto stage = [&](size_t k, const staging& s) {
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        move(s.areas[size_t(rank_)] + size_t(j) * p.piece, sends[size_t(j)] + k * p.piece,
             round_bytes(send_bytes[size_t(j)], k, p.piece));
  };
  size_t out_bytes = 0;
  for (size_t b : recv_bytes)
    out_bytes += b;
  const auto put = out_bytes >= kStreamMinAllToAll ? stream : move;
  const auto collect = [&](size_t k, const staging& s) {
    for (int i = 0; i < size_; ++i) {
      const char* from = i == rank_ ? sends[size_t(i)] + k * p.piece
                                    : s.areas[size_t(i)] + size_t(rank_) * p.piece;
      put(recvs[size_t(i)] + k * p.piece, from, round_bytes(recv_bytes[size_t(i)], k, p.piece));
    }
  };
  return exchange(header, all_headers, p, stage, collect);
}

} // namespace actorch::dist
