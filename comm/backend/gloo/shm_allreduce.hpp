// All-reduce through shared memory for a group whose ranks all run on one host (threads or
// processes): each rank reduces its share of the tensor straight out of the others' slots,
// without TCP. process_group_gloo uses it for all_reduce when every rank can map the segment;
// see Note [Shared-memory all-reduce] in shm_allreduce.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/store/store.hpp"

namespace actorch::dist {

class shm_allreduce {
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
  static std::unique_ptr<shm_allreduce> connect(store& st, int rank, int size, milliseconds timeout,
                                                const std::string& who);
  ~shm_allreduce();
  shm_allreduce(const shm_allreduce&) = delete;
  shm_allreduce& operator=(const shm_allreduce&) = delete;

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
    ~shared_block();
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

private:
  shm_allreduce(int rank, int size, milliseconds timeout, void* base, size_t bytes);
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
  std::mutex alloc_mu_;
  uint64_t allocations_ = 0; // shared blocks asked for (numbers them alike on every rank)
};

} // namespace actorch::dist
