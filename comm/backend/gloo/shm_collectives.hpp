// Collectives through shared memory for a group whose ranks all run on one host (threads or
// processes), without TCP: the all-reduce, where each rank reduces its share of the tensor
// straight out of the others' slots (Note [Shared-memory all-reduce] in shm_collectives.cpp),
// and every other collective as staged copies through the same segment (Note [Staged
// collectives] in shm_staged.cpp). process_group_gloo uses them when every rank can map the
// segment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/store/store.hpp"

namespace actorch::dist {

class shm_collectives {
public:
  using reduce_fn = void (*)(void*, const void*, const void*, size_t);
  /// Applied to each reduced element range before it is published: AVG's division by
  /// `divisor`, done once per element on one rank instead of on the whole tensor everywhere.
  using finish_fn = void (*)(void* data, size_t count, int64_t divisor);
  static constexpr size_t header_len = 16;

  /// Collective over the group's store: every rank calls it. Returns nullptr on every rank
  /// when the ranks are not all on this host, or any rank cannot make, map or verify the
  /// segment (the group then uses Gloo's TCP algorithms); in the latter case each rank that
  /// saw why logs a line on stderr beginning with `who` ("rank 3 of group [0, 1, 2, 3]").
  /// Throws actorch::error when the store times out.
  /// `single_copy`: a broadcast may read the root's tensor where it is, when every rank can
  /// (Note [Single-copy collectives] in shm_staged.cpp).
  static std::unique_ptr<shm_collectives> connect(store& st, int rank, int size,
                                                  milliseconds timeout, const std::string& who,
                                                  bool single_copy = true);
  ~shm_collectives();
  shm_collectives(const shm_collectives&) = delete;
  shm_collectives& operator=(const shm_collectives&) = delete;

  /// In-place all-reduce of `count` elements of `elem_size` bytes with `fn`. Every rank first
  /// publishes `header`; when they differ, returns false on every rank with all ranks' headers
  /// in `all_headers` (rank-major) and leaves `data` as it was. Throws std::runtime_error when
  /// a peer does not arrive within the timeout or its process is gone. With count 0 it only
  /// exchanges and compares the headers (every collective's check, see process_group_gloo).
  /// `finish` (may be null) is applied, with `divisor`, to every reduced element.
  bool run(void* data, size_t count, size_t elem_size, reduce_fn fn, const int64_t* header,
           std::vector<int64_t>& all_headers, finish_fn finish = nullptr, int64_t divisor = 1);

  /// Memory every rank maps: each rank's own block of `bytes` and its peers' (torch's
  /// symmetric memory). An all-reduce over such blocks reads the inputs where the ranks wrote
  /// them and writes the result straight into every block: no copies in or out (Note
  /// [Shared buffers]).
  struct shared_block {
    std::vector<char*> base; // by rank
    size_t bytes = 0;
    uint64_t id = 0; // the same on every rank
    int rank = 0;
    milliseconds timeout{};
    uint64_t epoch = 0; // barriers passed
    ~shared_block();
    /// Waits until every rank has passed as many barriers over this block, over signals of its
    /// own after each rank's bytes: independent of the segment's collectives, so any thread
    /// may call it (one per rank at a time). Throws std::runtime_error as run() does.
    void barrier();
  };
  /// A collective over the group's store: every rank calls it with the same `bytes`, in the
  /// same order as the others. Null on every rank when any rank cannot make or map its block.
  std::shared_ptr<shared_block> allocate(store& st, size_t bytes);
  /// In-place all-reduce of the `count` elements of `block` (every rank passes its handle of
  /// the same block), as run() otherwise: `header` first, false on a mismatch.
  bool run_shared(const shared_block& block, size_t count, size_t elem_size, reduce_fn fn,
                  const int64_t* header, std::vector<int64_t>& all_headers, finish_fn finish,
                  int64_t divisor);
  /// Below this many bytes run() (one barrier, copies of a few KiB) beats run_shared.
  static size_t small_bytes();

  // The staged collectives (shm_staged.cpp). Each takes the op's header as run() does and
  // returns false on every rank, touching no output, when the ranks' headers differ; the
  // caller has checked everything the header does not carry. Pointers are to contiguous
  // bytes; `outs`/`ins` are by rank. Throws std::runtime_error as run() does.
  bool all_gather(const int64_t* header, std::vector<int64_t>& all_headers, const char* in,
                  size_t bytes, const std::vector<char*>& outs);
  /// `outs` is read on the root only; root -1 is every rank (all_gather).
  bool gather(const int64_t* header, std::vector<int64_t>& all_headers, int root, const char* in,
              size_t bytes, const std::vector<char*>& outs);
  bool broadcast(const int64_t* header, std::vector<int64_t>& all_headers, int root, char* data,
                 size_t bytes);
  /// `ins` is read on the root only.
  bool scatter(const int64_t* header, std::vector<int64_t>& all_headers, int root,
               const std::vector<const char*>& ins, char* out, size_t bytes);
  /// `out` (the root's result, which may be `in`) is written on the root only.
  bool reduce(const int64_t* header, std::vector<int64_t>& all_headers, int root, const char* in,
              char* out, size_t count, size_t elem_size, reduce_fn fn, finish_fn finish,
              int64_t divisor);
  /// out = the reduction over ranks of their ins[rank_], `count` elements each.
  bool reduce_scatter(const int64_t* header, std::vector<int64_t>& all_headers,
                      const std::vector<const char*>& ins, char* out, size_t count,
                      size_t elem_size, reduce_fn fn, finish_fn finish, int64_t divisor);
  /// sends[j] (send_bytes[j]) to rank j, recvs[i] (recv_bytes[i]) from rank i; the sizes agree
  /// pairwise and `max_pair_bytes` is their maximum over the whole group (the same on every
  /// rank); no output overlaps an input.
  bool all_to_all(const int64_t* header, std::vector<int64_t>& all_headers,
                  const std::vector<const char*>& sends, const std::vector<size_t>& send_bytes,
                  const std::vector<char*>& recvs, const std::vector<size_t>& recv_bytes,
                  size_t max_pair_bytes);

  /// Whether every rank may read the others' memory, so that a middle-sized broadcast reads the
  /// root's tensor where it is (Note [Single-copy collectives]).
  bool single_copy() const { return single_copy_; }

private:
  /// Where a staged collective's round puts what the others read: rank q's area is areas[q],
  /// `capacity` bytes each, and any rank may write any area.
  struct staging {
    std::vector<char*> areas;
    size_t capacity = 0;
  };
  using round_fn = std::function<void(size_t round, const staging&)>;
  /// How a staged collective's payload goes through the areas: `pieces` pieces of up to
  /// `bytes` each per area (one per receiver, or one), `piece` bytes of each per round, piece j
  /// at j * piece in its area. `pipelined`: Note [Pipelined rounds].
  struct plan {
    bool small = true;
    bool pipelined = false;
    size_t piece = 0;
    size_t rounds = 1;
  };
  static plan plan_of(size_t bytes, size_t pieces, bool pipelined = false);
  /// The rounds of a staged collective (Note [Staged collectives]).
  bool exchange(const int64_t* header, std::vector<int64_t>& all_headers, const plan& p,
                const round_fn& stage, const round_fn& collect);
  /// Reads rank q's addresses as published in a single-copy op: its table.
  using table = const uint64_t*;
  using read_fn = std::function<void(const std::vector<table>& tables)>;
  /// A single-copy op (Note [Single-copy collectives]): publishes `header` and `mine` (this
  /// rank's addresses), then `read` copies from the ranks' tables, then all are done.
  bool direct(const int64_t* header, std::vector<int64_t>& all_headers,
              const std::vector<const char*>& mine, const read_fn& read);
  /// Copies `n` bytes at `from` in rank q's memory to `to` in this process.
  void read_from(int q, char* to, uint64_t from, size_t n) const;

  shm_collectives(int rank, int size, milliseconds timeout, void* base, size_t bytes);
  void barrier(size_t which, uint64_t epoch);
  bool same_headers(uint64_t parity, std::vector<int64_t>& all_headers) const;
  bool run_small(void* data, size_t count, size_t elem_size, reduce_fn fn, const int64_t* header,
                 std::vector<int64_t>& all_headers, uint64_t parity, finish_fn finish,
                 int64_t divisor);

  int rank_;
  int size_;
  milliseconds timeout_;
  void* base_;
  size_t bytes_;
  uint64_t epoch_ = 0; // barriers passed
  uint64_t ops_ = 0;   // ops run; its parity picks the header and small buffer
  bool single_copy_ = false;
  std::mutex alloc_mu_;
  uint64_t allocations_ = 0; // shared blocks asked for (numbers them alike on every rank)
};

} // namespace actorch::dist
