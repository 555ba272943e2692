// Every message type of the actor graph, in one place (STYLE.md). The data loader's graph
// (actors/loader/):
//   coordinator ──(load_atom, index_batch)──> source (dataset worker, or a user's actor)
//   source ──loaded_batch (the reply, or the batch shelf)──> the coordinator's host (finish
//   for batches that need it, reorder buffer) ──delivery──> consumer; a consumer actor answers
//   (credit_atom, run_id), the range-for hands its credit over in its own thread
// See Note [Loader credits] in actors/loader/dispatcher.cpp for the flow control.
// The types carry tensors (shared storage) and therefore stay inside one process: they are
// allowed as local-only message types rather than made serializable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/all.hpp"
#include "core/data/sample.hpp"

namespace actorch::actors {

/// (load_atom, index_batch): asks a source to load one batch.
using load_atom = caf::atom_constant<caf::atom("load")>;
/// (credit_atom, run_id): the consumer released one batch of run `run_id`.
using credit_atom = caf::atom_constant<caf::atom("credit")>;
/// (batch_atom, delivery): a batch for a consumer actor (see data_loader::run_epoch).
using batch_atom = caf::atom_constant<caf::atom("batch")>;
/// (epoch_atom, epoch_plan): the coordinator starts a run, dropping whatever remains of the last.
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
/// (timeout_atom, run_id, seq, clock): the supervisor's deadline for one load (timeout > 0);
/// `clock` numbers it, so that one restarted since is ignored.
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
/// (worker_atom, id) -> source_actor: the coordinator's current source in slot `id` (tests only:
/// see data_loader::worker_for_testing).
using worker_atom = caf::atom_constant<caf::atom("worker")>;

/// One batch of dataset indices, as the coordinator sends it (made by make_task, plan.hpp).
struct index_batch {
  uint64_t run_id = 0;          // which run (epoch start) it belongs to; stale ones are skipped
  int64_t epoch = 0;            // the loader's epoch
  int64_t seq = 0;              // position in the epoch's sampler order (batch index)
  std::vector<int64_t> indices; // dataset indices, in order
  uint64_t seed = 0;            // batch_seed(base seed, epoch, seq): see Note [Batch randomness]
  /// false (batch_size = nullopt): `indices` holds one index and the reply is that sample
  /// through default_convert (or collate_fn), not a batch. An iterable worker then yields one
  /// sample per task.
  bool auto_collation = true;
  /// An iterable worker's first task of a resumed run: one seed per batch of its stream
  /// delivered before the state was saved, to pass over first (Note [Iterable resume]).
  std::vector<uint64_t> skip_seeds;
  /// For a worker process's copy of a data::keyed_dataset: keys_of(indices), set by the worker
  /// that hands it the task; empty otherwise.
  std::string keys;
};

/// A source's reply: the loaded batch, or what went wrong.
struct loaded_batch {
  uint64_t run_id = 0;
  int64_t seq = 0;
  int64_t worker = -1;  // which worker loaded it (-1 for a user's source)
  data::sample data;    // the collated batch; or, when !collated, a tuple of the samples
  bool collated = true; // false: the loader's collate stage collates `data`'s elements
  bool pinned = false;  // true: every tensor already lies in pinned memory
  std::string error;    // non-empty: loading failed, the message names worker and sample
  /// An iterable-dataset worker's stream is exhausted: no data (see Note [Iterable runs]).
  bool end_of_data = false;
};

/// What reaches the consumer: one batch in delivery order, an error, or the end of the epoch.
struct delivery {
  uint64_t run_id = 0;
  int64_t seq = -1;
  data::sample data;
  std::string error;
  bool end_of_epoch = false;
  /// The error is the batch's own (its dataset's or collate's exception) in a map-style run
  /// for the range-for consumer: the run goes on after it, as torch's iterator does.
  bool recoverable = false;
};

/// One run of the coordinator: the batches still to load this epoch, in sampler order.
struct epoch_plan {
  uint64_t run_id = 0;
  int64_t epoch = 0;
  uint64_t base_seed = 0;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> batches; // (seq, indices)
  int64_t credits = 0; // prefetch_factor x num_workers: batches in flight at most
  caf::actor sink;     // deliver (batch_atom, delivery) here; null: coordinator::deliveries()
  /// The sources are iterable-dataset workers: `batches` is empty, the dispatcher asks the
  /// workers round-robin until every one is exhausted (Note [Iterable runs] in dispatcher.cpp).
  bool iterable = false;
  /// Iterable, resuming mid-epoch: per source, the batches of its stream delivered before.
  std::vector<int64_t> resumed;
};

} // namespace actorch::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::index_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::loaded_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::delivery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::epoch_plan)
