// The comm actor's message: a bucket to reduce across processes, from a trainer's thread
// (local_replicas) to the comm actor. Apart from trainer_messages.hpp so that the comm actor
// includes none of the trainer's headers. Local-only: it carries a tensor and a callback.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "caf/all.hpp"
#include "comm/process_group.hpp"

namespace actorch::actors {

/// (reduce_atom, comm_request): a bucket summed over this process's replicas, to reduce
/// across processes.
using reduce_atom = caf::atom_constant<caf::atom("reduce")>;

struct comm_request {
  uint64_t seq = 0;
  tensor sum;
  dist::reduce_op op = dist::reduce_op::sum;
  std::function<void(std::exception_ptr)> done; // called once the bucket is reduced, or failed
  std::string tag; // the submitting thread's dist::collective_tag, for the group's ledger
};

} // namespace actorch::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::actors::comm_request)
