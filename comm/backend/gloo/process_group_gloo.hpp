// The Gloo process group: collectives and point-to-point ops on CPU tensors over TCP
// (c10d's ProcessGroupGloo). See Note [Gloo group threads] in process_group_gloo.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.hpp"
#include "comm/store/store.hpp"

namespace actorch::dist {

class process_group_gloo final : public process_group {
public:
  struct options {
    /// How long an op (and the rendezvous) may wait for its peers.
    milliseconds timeout{1800000};
    /// The address this rank listens on for its peers, when no interfaces are given.
    std::string hostname = "127.0.0.1";
    /// Network interfaces to use, round-robin (see Note [Socket interfaces] in
    /// process_group_gloo.cpp); empty: those of GLOO_SOCKET_IFNAME when it is set, else
    /// `hostname`. An interface that does not exist is an error listing those that do.
    std::vector<std::string> interfaces = {};
    /// Every collective through shared memory when every rank runs on this host (see
    /// shm_collectives.hpp); the environment variable ACTORCH_GLOO_SHM=0 turns it off.
    bool shared_memory = true;
    /// Through shared memory, a broadcast of 256 KiB to 2 MiB copies each byte once, straight
    /// from the root's tensor, where every rank may read the others' memory (Note [Single-copy
    /// collectives] in shm_staged.cpp); false, or the environment variable
    /// ACTORCH_GLOO_SINGLE_COPY=0: staged through the segment, two copies.
    bool single_copy = true;
    /// The job secret every pair proves before it carries data (Note [Gloo pair proofs] in
    /// pair_mesh.cpp); empty: ACTORCH_JOB_TOKEN's (or ACTORCH_JOB_TOKEN_FILE's),
    /// and no proof when there is none.
    std::string secret = {};
    /// A collective waiting longer than min(report_delay, timeout / 2) prints the roll call of
    /// the group's ranks on stderr and goes on waiting (Note [Collective ledger] in
    /// comm/backend/ledger.cpp); 0: never. The error at the timeout carries it always.
    milliseconds report_delay{10000};
  };

  /// Rendezvous of `size` ranks through `store` (which no other group may share: give each a
  /// prefix_store of its own); blocks until every rank has joined, or throws after the timeout.
  process_group_gloo(std::shared_ptr<store> store, int rank, int size, options opts,
                     std::vector<int> global_ranks = {});
  /// Finishes the ops already issued (each bounded by the timeout), then closes the mesh.
  ~process_group_gloo() override;

  std::string backend() const override { return "gloo"; }
  milliseconds timeout() const;
  /// Shuts every pair's socket down, failing the ops waiting on it (process_group::abort;
  /// Note [Aborting a Gloo group]).
  void abort() override;
  /// How the collectives move bytes: "tcp" (Gloo's pairs), "shared memory" (staged through
  /// the segment) or "shared memory, single copy" (as staged, and ranks may read each other's
  /// memory: Note [Single-copy collectives]).
  std::string transport() const;
  /// Why the group refuses work (a Gloo failure poisons its context), or "" while usable.
  std::string broken_reason() const;

  work broadcast(tensor& t, int root) override;
  work all_reduce(tensor& t, reduce_op op) override;
  /// Memory the ranks' shared-memory segment reaches (shm_collectives::allocate) when every rank
  /// is on this host; see process_group::empty_shared.
  tensor empty_shared(int64_t numel, dtype dt) override;
  /// How many of empty_shared's blocks are alive on this rank.
  size_t shared_blocks() const;
  std::shared_ptr<symmetric_memory> empty_symmetric(int64_t numel, dtype dt) override;
  work reduce(tensor& t, int root, reduce_op op) override;
  work all_gather(std::vector<tensor>& outputs, const tensor& input) override;
  work all_gather_into_tensor(tensor& output, const tensor& input) override;
  work gather(std::vector<tensor>& outputs, const tensor& input, int root) override;
  work scatter(tensor& output, const std::vector<tensor>& inputs, int root) override;
  work reduce_scatter(tensor& output, const std::vector<tensor>& inputs, reduce_op op) override;
  work all_to_all(std::vector<tensor>& outputs, const std::vector<tensor>& inputs) override;
  work barrier() override;
  work monitored_barrier(milliseconds timeout, bool wait_all_ranks) override;
  work send(const tensor& t, int dst, int tag) override;
  work recv(tensor& t, int src, int tag) override;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace actorch::dist
