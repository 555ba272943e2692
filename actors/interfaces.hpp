// Typed actor interfaces of the actor graph, one comment per signature (STYLE.md).
#pragma once

#include "actors/messages.hpp"

namespace actorch::actors {

/// A data source: what the loader's coordinator sends index batches to. The built-in dataset
/// workers implement it; a user plugs in their own actor (reading a database, a remote store)
/// in its place by implementing it too (see docs/data.md, "A source actor of your own", and
/// examples/sqlite_source). Contract:
/// - Reply to every task once (the handler's result, or a response promise delivered later),
///   echoing task.run_id and task.seq. Tasks arrive as plain messages, so the reply goes
///   to the coordinator's host as one; replying with a caf::error ends the run naming the source.
/// - Either collate yourself (collated = true) or reply with `data` = a tuple of the samples in
///   task.indices' order (collated = false) and let the loader's collate stage do it.
/// - Report a failure in `error` (name the sample index), do not throw: an exception escaping
///   the handler kills the actor, which the loader treats as a dead source.
/// - Blocking work is fine: the loader never waits on a source inside a scheduler thread, but
///   spawn a blocking source `detached` so that it does not block CAF's scheduler.
using source_actor = caf::typed_actor<
    /// Load the samples at task.indices (randomness from task.seed) and reply with the batch.
    caf::replies_to<load_atom, index_batch>::with<loaded_batch>>;

} // namespace actorch::actors
