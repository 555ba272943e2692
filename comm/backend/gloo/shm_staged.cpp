// The staged collectives of shm_collectives: every collective but the all-reduce, as rounds of
// copies through the shared segment (Note [Staged collectives] in shm_collectives.cpp).
#include <algorithm>
#include <cstring>

#include "comm/backend/gloo/shm_collectives.hpp"

namespace actorch::dist {

namespace {

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

} // namespace

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
  const auto collect = [&](size_t k, const staging& s) {
    if (!everyone && rank_ != root)
      return;
    const size_t n = round_bytes(bytes, k, p.piece);
    for (int q = 0; q < size_; ++q)
      move(outs[size_t(q)] + k * p.piece, q == rank_ ? in + k * p.piece : s.areas[size_t(q)], n);
  };
  return exchange(header, all_headers, p, stage, collect);
}

bool shm_collectives::broadcast(const int64_t* header, std::vector<int64_t>& all_headers, int root,
                                char* data, size_t bytes) {
  const plan p = plan_of(bytes, 1, true);
  const auto stage = [&](size_t k, const staging& s) {
    if (rank_ == root)
      move(s.areas[size_t(root)], data + k * p.piece, round_bytes(bytes, k, p.piece));
  };
  const auto collect = [&](size_t k, const staging& s) {
    if (rank_ != root)
      move(data + k * p.piece, s.areas[size_t(root)], round_bytes(bytes, k, p.piece));
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
  const auto collect = [&](size_t k, const staging& s) {
    for (int i = 0; i < size_; ++i) {
      const char* from = i == rank_ ? sends[size_t(i)] + k * p.piece
                                    : s.areas[size_t(i)] + size_t(rank_) * p.piece;
      move(recvs[size_t(i)] + k * p.piece, from, round_bytes(recv_bytes[size_t(i)], k, p.piece));
    }
  };
  return exchange(header, all_headers, p, stage, collect);
}

} // namespace actorch::dist
