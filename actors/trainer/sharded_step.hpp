// Trainer actors sharing one copy of the parameters and stepping a shard each
// (ZeroRedundancyOptimizer's idea without its exchanges): the actors of one process, or one
// actor per process of processes on one host through memory they all map. See Note [Sharded
// step] and Note [Sharded step across processes] in sharded_step.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/ddp/replica_group.hpp"
#include "comm/process_group.hpp"
#include "core/nn/module.hpp"
#include "core/optim/optimizer.hpp"

namespace actorch::actors {

/// What the replicas share (the actors of one process, or one actor per process on one host):
/// their parameters, who steps which, the barriers.
class sharded_step : public std::enable_shared_from_this<sharded_step> {
public:
  /// The `num_local` trainer actors of a job of one process.
  explicit sharded_step(int num_local) : replicas_(size_t(num_local)) {}
  /// One trainer actor in each of `group`'s processes (Note [Sharded step across processes]).
  explicit sharded_step(std::shared_ptr<dist::process_group> group)
      : replicas_(1), group_(std::move(group)) {}
  /// Across processes, takes back what join() set on the parameters: backward makes their
  /// gradients in .grad again and no longer publishes them, so a model that outlives the job
  /// (its make_model kept it) trains or evaluates on its own.
  ~sharded_step();
  sharded_step(const sharded_step&) = delete;
  sharded_step& operator=(const sharded_step&) = delete;

  /// Replica i's part of the set-up, once its parameters equal every other replica's (after
  /// DDP's broadcast): they take replica 0's memory, and replica i gets the optimizer its spec
  /// makes over its shard, an equal share of the parameters' elements (pieces of them, as 1-D
  /// views). Blocks until every replica joined. Across processes, where the group has no
  /// memory every process maps or the parameters are not of one dtype, nothing changes and
  /// active() is false afterwards, alike in every process.
  std::unique_ptr<optim::optimizer>
  join(int i, nn::module& model,
       const std::function<std::unique_ptr<optim::optimizer>(nn::module&)>& make_optimizer);
  /// False after a join that could not shard the step.
  bool active() const { return active_; }
  /// Whether the replicas are processes: state_dict() is then a collective.
  bool across_processes() const { return group_ != nullptr; }

  /// After replica i's backward: the average over the replicas of its shard's gradients (in
  /// replica order, divided once, as the in-place all-reduce computes it) into the .grad of its
  /// pieces, which its optimizer steps. In one process the replicas share the averaging of
  /// every shard as the gradients complete (Note [Shared averaging]); across processes each
  /// averages its own once every process's backward is done.
  void average_shard(int i);
  /// In one process: how many pieces of the others' shards replica i has averaged so far
  /// (Note [Shared averaging]; for tests and traces).
  int64_t averaged_for_others(int i) const { return replicas_[size_t(i)].for_others; }
  /// After replica i's step of its shard: waits until every shard is stepped (the next forward
  /// reads them all).
  void stepped(int i);

  /// The whole optimizer state in the unsharded optimizer's layout. In one process: called by
  /// one replica while every other one waits between stepped() and its next step (a
  /// checkpoint). Across processes: a collective over `group` (the replicas' group), the
  /// whole state on its rank 0 and an empty one elsewhere.
  optim::optimizer_state state_dict(dist::replica_group* group = nullptr) const;
  /// Replica i's shard of a whole state (a checkpoint's, or a plain optimizer's).
  void load_state_dict(int i, const optim::optimizer_state& whole);

  /// Fails the barriers of every replica with `e`: a replica that died does not leave the
  /// others waiting.
  void abort(std::exception_ptr e);

private:
  // A run of parameter `param`'s elements from `offset`, as a 1-D leaf over the shared memory
  // that the shard's optimizer steps.
  struct piece {
    size_t param;
    int64_t offset, length;
    tensor view;
  };
  struct replica {
    std::vector<tensor> params;
    std::vector<piece> shard;
    optim::optimizer* opt = nullptr; // null when the shard is empty
    // Note [Shared averaging]:
    int64_t steps = 0;      // steps whose averaging this replica has begun
    int64_t for_others = 0; // items of other shards it averaged
    // In one process (across processes the gradients and words are in mapped memory):
    std::vector<tensor> flat;   // parameter k's gradient of this step, flat, as its hook saw it
    std::vector<tensor> spare;  // piece j's average where this replica has no gradient of it
    std::vector<int64_t> words; // its words (layout in word())
  };
  // A run of a piece's elements that one replica averages (Note [Shared averaging]).
  struct work_item {
    size_t param, piece; // the owner's shard[piece], over parameter `param`
    int64_t at, length;  // the run's first element within the parameter, and its length
  };
  // Across processes: the memory every process maps, by process rank.
  struct mapped {
    tensor params;             // rank 0's buffer: the one copy of the parameters
    std::vector<tensor> grads; // rank q's gradients, which any process may average
    std::vector<tensor> words; // rank q's words (layout in word())
    std::shared_ptr<dist::symmetric_memory> signals; // the grads', whose barrier the step uses
    std::vector<int64_t> offsets;               // parameter k's first element in the flat layout
    std::chrono::milliseconds timeout{1800000}; // the group's: how long a wait for a peer lasts
  };
  // The pieces of run r of n over `params`.
  static std::vector<piece> pieces_of(const std::vector<tensor>& params, int r, int n);
  bool map_parameters(replica& me);
  // Parameter k's part of this process's gradient block, shaped as `param`.
  tensor gradient_slot(size_t k, const tensor& param) const;
  void barrier();

  // Note [Shared averaging]. Replica q's words, by index: [0, P) ready[k] (the step in which
  // its gradient of parameter k was complete), P done (the step whose backward it ended), P + 1
  // its pid (across processes); on replica 0 also P + 2 + r the claims of shard r's items and
  // P + 2 + n + r how many of them are averaged (both over every step). Read and written
  // through the accessors below only, as std::atomic_ref.
  int64_t& word(size_t q, size_t index);
  std::atomic_ref<int64_t> ready_word(size_t q, size_t k) { return std::atomic_ref(word(q, k)); }
  std::atomic_ref<int64_t> done_word(size_t q) { return std::atomic_ref(word(q, param_count())); }
  std::atomic_ref<int64_t> pid_word(size_t q) {
    return std::atomic_ref(word(q, param_count() + 1));
  }
  std::atomic_ref<int64_t> claims_word(size_t r) {
    return std::atomic_ref(word(0, param_count() + 2 + r));
  }
  std::atomic_ref<int64_t> averaged_word(size_t r) {
    return std::atomic_ref(word(0, param_count() + 2 + replica_count() + r));
  }
  // How many words each replica has (P + 2 + 2n; only replica 0's last 2n are used).
  size_t word_count() const { return param_count() + 2 + 2 * replica_count(); }
  size_t param_count() const { return replicas_[0].params.size(); }
  size_t replica_count() const;
  // This process's replica i's index among all replicas (its rank across processes).
  size_t index_of(int i) const;
  // Backward's hook: parameter k's gradient is complete on local replica i (across processes:
  // copied into the process's block first, where backward did not write it).
  void mark_ready(int i, size_t k, const tensor& grad);
  // Shard r's item w's average into r's gradient (or spare).
  template <class T> void average_item(size_t r, const work_item& w, int64_t step);
  // Whether every replica's gradient of parameter k is final in `step` (marked, or its
  // backward ended).
  bool complete(size_t k, int64_t step);
  // The next unclaimed item of shard r in `step`, with the claim count it was read at (for the
  // claim's compare-and-set); null when every item of r is claimed.
  const work_item* next_item(size_t r, int64_t step, int64_t& claims);
  // Whether some shard's next item is ready to average in `step` (complete()); `left`: whether
  // any shard has an item left at all.
  bool any_item_ready(int64_t step, bool& left);
  // Waits until ready(), spinning briefly, then in short naps; throws as a barrier does where
  // a replica aborted (in one process) or a peer's process exited or the group's timeout
  // passed (across processes).
  template <class Ready> void wait_until(const Ready& ready);

  std::vector<replica> replicas_;
  std::vector<std::vector<work_item>> work_;   // by shard: its items, in the order backward
                                               // completes them
  std::shared_ptr<dist::process_group> group_; // across processes
  mapped mapped_;
  bool active_ = true;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr aborted_;
  std::atomic<bool> aborting_{false}; // aborted_ is set: the waits of wait_until end
};

} // namespace actorch::actors
