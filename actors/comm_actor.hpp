// The comm actor: one per process, the cross-process level of gradient exchange. The trainer
// actors of this process sum each bucket in shared memory (dist::local_replicas); the last one
// to add its part hands the sum here, and the comm actor starts the process group's all_reduce
// on it, in the order every process agrees on (Note [Bucket order] in comm/ddp/reducer.cpp), then
// completes the bucket's future. Without a process group (one process) it completes at once.
// This header includes no CAF.
#pragma once

#include <memory>

#include "comm/ddp/replica_group.hpp"
#include "comm/process_group.hpp"

namespace caf {
class actor_system;
}

namespace actorch::actors {

/// Spawns this process's comm actor in `sys` (which must outlive the returned object) and
/// returns it as local_replicas' process_exchange. `pg` is the process group across processes
/// (null: this process is the whole job). Destroying the returned object stops the actor,
/// failing whatever it still holds.
std::shared_ptr<dist::process_exchange> spawn_comm_actor(caf::actor_system& sys,
                                                         std::shared_ptr<dist::process_group> pg);

} // namespace actorch::actors
