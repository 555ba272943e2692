// Message types of the training graph (trainer actors, comm actor, the job's monitor):
//   trainer ──(progress_atom, train_progress)──> monitor (every step)
//   trainer ──(epoch_end_atom, epoch_summary)──> monitor (local replica 0, each epoch)
//   trainer ──(done_atom, replica_report)──> monitor (once, at the end)
//   local_replicas (a trainer's thread) ──(reduce_atom, comm_request)──> comm actor
//     (comm_messages.hpp, so that the comm actor needs none of the trainer's types)
// They carry tensors and callbacks, so they stay inside one process (local-only types).
// Kept apart from messages.hpp (the loader's) so that each graph's types read together.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/comm_messages.hpp"
#include "actors/trainer.hpp"
#include "caf/all.hpp"

namespace actorch::actors {

/// (train_atom): a trainer actor starts its training loop.
using train_atom = caf::atom_constant<caf::atom("train")>;
/// (progress_atom, train_progress): one step done.
using progress_atom = caf::atom_constant<caf::atom("progress")>;
/// (done_atom, replica_report): a trainer finished (or failed).
using done_atom = caf::atom_constant<caf::atom("done")>;
/// (epoch_end_atom, epoch_summary): job-wide numbers of an epoch, from local replica 0.
using epoch_end_atom = caf::atom_constant<caf::atom("epochend")>;

struct replica_report {
  int rank = 0;
  int local_rank = 0;
  std::string error; // non-empty: the replica failed
  std::vector<trace::clock::time_point> step_end_times;
  bool sharded = false; // the optimizer step was sharded (Note [Sharded step])
};

} // namespace actorch::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::train_progress)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::replica_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::epoch_summary)
