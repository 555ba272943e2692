// The Gloo group's private state and the steps its ops share (process_group_gloo.cpp); each
// family of ops is a file of its own: broadcast_scatter.cpp, reduce_ops.cpp, gather_ops.cpp,
// all_to_all.cpp, barrier.cpp, p2p.cpp. Included by those files only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "comm/backend/gloo/gloo_checks.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/backend/gloo/shm_collectives.hpp"
#include "comm/backend/ledger.hpp"
#include "comm/backend/serial_executor.hpp"
#include "kernels/cpu/elementwise.hpp"

namespace actorch::dist {

using namespace gloo_checks;

/// The outputs of a staged gather (one tensor per rank), each written where it lies when it is
/// contiguous, else through a contiguous copy written back.
struct staged_outputs {
  std::vector<contiguous_buffer> bufs;
  std::vector<char*> ptrs;
  explicit staged_outputs(const std::vector<tensor>& outs) {
    for (const tensor& t : outs) {
      bufs.emplace_back(t);
      ptrs.push_back(static_cast<char*>(bufs.back().flat.data_ptr()));
    }
  }
  void copy_back() {
    for (auto& b : bufs)
      b.copy_back();
  }
};

/// The combine function of `op` on `t` for Gloo and the shared-memory all-reduce (AVG sums;
/// the caller divides).
kernels::cpu::combine_fn reduce_function(reduce_op op, dtype t);

struct process_group_gloo::impl {
  process_group_gloo& pg;
  std::shared_ptr<store> st;
  options opts;
  // One device and full mesh per interface; see Note [Socket interfaces].
  std::vector<std::shared_ptr<gloo::transport::Device>> devices;
  std::vector<std::shared_ptr<gloo::Context>> contexts;
  std::unique_ptr<shm_collectives> shm;      // every collective's path when all ranks are here
  std::unique_ptr<collective_ledger> ledger; // Note [Collective ledger]; set once connected
  // The shared blocks empty_shared handed out, by this rank's address of each; a block goes
  // when its last tensor does.
  std::mutex shared_mu;
  std::map<const void*, std::weak_ptr<shm_collectives::shared_block>> shared;
  /// The block `flat` is the whole of, or null.
  std::shared_ptr<shm_collectives::shared_block> shared_block_of(const tensor& flat);

  mutable std::mutex mu; // guards broken and next_seq; held while posting, so posts keep order
  std::string broken;    // see Note [Gloo group threads]
  uint32_t next_seq = 0;
  int64_t monitored_seq = 0; // collectives thread only
  // Last, so they stop before the state their tasks use goes away.
  serial_executor collectives{{.spin = std::chrono::microseconds(50)}};
  serial_executor p2p_waiter{{}};

  impl(process_group_gloo& g, std::shared_ptr<store> s, options o)
      : pg(g), st(std::move(s)), opts(std::move(o)) {}

  /// The context of the n-th collective, or of a point-to-point op with tag n.
  const std::shared_ptr<gloo::Context>& ctx(uint32_t n) const {
    return contexts[n % contexts.size()];
  }
  /// "[1, 2]": the group's other ranks, as global ranks.
  std::string peers() const;
  /// "rank 0 of group [0, 1, 2]".
  std::string where() const;

  /// Called with the Gloo exception of a failed op: poisons the group, returns the op's error.
  /// The group is broken: `op`, which began at `began`, failed with `what` (the message says
  /// how long it ran, and the group's timeout).
  std::exception_ptr fail_group(const std::string& op, const std::string& what,
                                std::chrono::steady_clock::time_point began);
  /// The error of an op issued after the group failed. Called with mu held.
  std::exception_ptr refused(const std::string& op) const;

  /// Queues collective `op` behind those issued before it; `run` gets the issue number and
  /// returns the work's result. See Note [Gloo group threads].
  work enqueue(std::string op, std::function<std::vector<tensor>(uint32_t)> run);

  /// Allgathers every rank's header and throws, on every rank, when they disagree.
  void check_headers(const std::string& op, uint32_t seq, const op_header& mine);
  [[noreturn]] void throw_mismatch(const std::string& op, const std::vector<int64_t>& all);

  /// An op's tag and timeout: tag 4n+1 for the n-th collective.
  template <class Options> void tag(Options& o, uint32_t seq) {
    o.setTag(4 * seq + 1);
    o.setTimeout(opts.timeout);
  }

  /// A posted send or recv (p2p.cpp): the p2p waiter completes `w` once Gloo has finished it.
  struct p2p_op;
  void wait_p2p(std::shared_ptr<p2p_op> op, work w);

  /// Runs a staged collective through shared memory (`run` returns false on a header
  /// mismatch) and throws the mismatch error for `op`.
  void staged(const std::string& op, const std::function<bool(std::vector<int64_t>&)>& run);

  /// all_to_all's first exchange: the op header, then every rank's counts (all_to_all.cpp),
  /// rank-major; and their pairwise check, throwing on every rank when a pair disagrees.
  std::vector<int64_t> all_to_all_counts(const std::vector<int64_t>& counts, dtype dt,
                                         uint32_t seq);
  void check_pairs(const std::vector<int64_t>& all, size_t n) const;
  /// all_to_all's data through shared memory, once the counts agree.
  void shm_all_to_all(const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
                      const std::vector<int64_t>& all, dtype dt);

  /// all_reduce's header check and reduction, through shared memory when the group has it.
  void allreduce_checked(tensor& flat, reduce_op op, uint32_t seq);
  /// In-place all-reduce of a contiguous tensor over Gloo (AVG divides afterwards).
  void allreduce_flat(tensor& flat, reduce_op op, uint32_t seq);
};

} // namespace actorch::dist
