// The replicas of a data-parallel job as the gradient reducer and SyncBatchNorm see them: a
// global rank, a size, and an all-reduce across every replica. Two levels can sit behind it
// (docs/architecture.md, "One gradient, end to end"): the trainer threads of one process sum
// their tensors in shared memory (local_replicas), and one process-group all_reduce per
// process crosses processes (a process_exchange, which the comm actor implements).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "comm/process_group.hpp"

namespace actorch::dist {

class replica_group {
public:
  virtual ~replica_group() = default;
  /// This replica's global rank: process rank x replicas per process + local index.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The device the collectives take tensors on (process_group::collective_device): DDP's
  /// buckets live there, and its bookkeeping (bucket orders, parameter checks) travels there.
  virtual device collective_device() const { return kCPU; }
  /// Reduces `t` in place over every replica (sum, avg, min or max). Every replica issues
  /// its collectives in the same order, each with a tensor of its own. Until the work
  /// completes, the caller leaves `t` alone (neither reads nor writes it); then `t`, which is
  /// also result()[0], holds the reduction.
  virtual work all_reduce(const tensor& t, reduce_op op) = 0;
  /// A zeroed 1-D buffer of `numel` elements of `dt` that all_reduce is handed again and
  /// again (DDP's buckets): memory the processes reduce without copies where the process
  /// group has it (process_group::empty_shared), ordinary memory otherwise. A collective:
  /// every replica calls it alike, in the same order.
  virtual tensor new_buffer(int64_t numel, dtype dt);
  /// Several tensors of one dtype reduced in place at once (torch's all_reduce_coalesced),
  /// with all_reduce's contract; result() is the list. By default through one flat buffer
  /// (copied in, reduced, copied back).
  virtual work all_reduce_coalesced(std::vector<tensor> ts, reduce_op op);
  /// Whether all_reduce_coalesced reduces the tensors where they lie, with no flat buffer:
  /// where the replicas share memory and nothing crosses processes. DDP then reduces the
  /// gradients themselves instead of copying them into buckets.
  virtual bool reduces_in_place() const { return false; }
};

/// One replica per process: the collectives of `pg` (DistributedDataParallel as torch runs it).
std::shared_ptr<replica_group> process_replicas(std::shared_ptr<process_group> pg);

/// Rank 0's values of `ts` on every replica, written into each (the handles share the
/// caller's storage), through one all_reduce per dtype, on g's collective device (tensors
/// elsewhere travel there and back); blocks. Every replica passes tensors
/// of the same shapes and dtypes in the same order.
void broadcast_from_rank0(replica_group& g, std::vector<tensor> ts);
/// The same from replica `src`.
void broadcast_from(replica_group& g, std::vector<tensor> ts, int src);

/// Every replica's `row` (int64, 1-D, lengths may differ), as a [size, max length] CPU tensor
/// padded with `pad`, through all_reduce; blocks.
tensor all_gather_rows(replica_group& g, const tensor& row, int64_t pad);

/// The cross-process step of local_replicas.
class process_exchange {
public:
  virtual ~process_exchange() = default;
  virtual int process_rank() const = 0;
  virtual int num_processes() const = 0;
  /// `sum` is the reduction over this process's replicas of its collective number `seq`
  /// (0, 1, ... on every process). Reduce it in place across processes with `op`, starting the
  /// collectives in seq order, then call done(nullptr), or done(error) when it failed. Called
  /// from the replicas' threads, seqs possibly out of order.
  virtual void submit(uint64_t seq, tensor sum, reduce_op op,
                      std::function<void(std::exception_ptr)> done) = 0;
  /// process_group::empty_shared of the processes' group (undefined: none), called by one
  /// replica per process, alike on every process.
  virtual tensor empty_shared(int64_t numel, dtype dt);
  /// Where submit() takes its sums (process_group::collective_device).
  virtual device collective_device() const { return kCPU; }
};

/// N replicas in this process, one per trainer thread, over a process_exchange. Each replica's
/// n-th collective meets the others' n-th: the last to arrive reduces every replica's tensor
/// in place through shared memory (no copies through sockets), handing the local sum to the
/// exchange when there are other processes (Note [Local reduction]). Replicas may sit on GPUs,
/// one device each, shared or not (Note [Replicas on GPUs]).
class local_replicas {
public:
  /// `devices`: replica i's tensors live on devices[i] (its collective_device(), where DDP puts
  /// its buckets); empty: every replica on the CPU. With other processes, replica 0's device is
  /// the exchange's collective_device().
  /// @pre every process of the job has the same `num_local`.
  local_replicas(int num_local, std::shared_ptr<process_exchange> exchange,
                 std::vector<device> devices = {});
  ~local_replicas();
  local_replicas(const local_replicas&) = delete;
  local_replicas& operator=(const local_replicas&) = delete;

  int num_local() const;
  /// Replica `i`'s handle (global rank = process rank x num_local + i). Each handle is used by
  /// one thread at a time.
  std::shared_ptr<replica_group> replica(int i);
  /// Fails every pending and future collective with `e`: when a replica dies, the others get
  /// its error instead of waiting for it forever.
  void abort(std::exception_ptr e);

  struct state; // shared with the replica handles (replica_group.cpp)

private:
  std::shared_ptr<state> state_;
};

} // namespace actorch::dist
