// The batch shelf (batch_shelf.hpp).
//
// Note [Batch shelf]
// ~~~~~~~~~~~~~~~~~~
// With in_order, a batch that arrives before an earlier one can only wait in the reorder
// buffer; as a reply it still wakes the consumer's thread, blocked on the batch it waits for,
// and on two cores that wake preempts a worker for nothing (docs/performance.md, "Batch
// shelf"). So the loader's own workers (not a user's source) offer each finished batch to a
// shelf they share with the coordinator. In a map-style, in_order run of the range-for the
// shelf keeps it, and the worker replies with nothing, unless it is the batch the consumer
// waits for; in any other run the coordinator keeps the shelf closed. The consumer's thread
// collects the shelf (coordinator::collect: its batches go through on_loaded as replies would,
// sender included) and, under the shelf's lock, names the batch it now waits for: before it
// blocks, when it returns a credit, before it handles a deadline or a down message; and again
// until the shelf is empty. So the batch it blocks for is never on the shelf, and a shelved
// batch is neither timed out nor re-issued. (Deadlines fire in the order their clocks started,
// so a collect before blocking again usually takes a shelved batch in before its own deadline
// is read; the one before a deadline does not rely on that.) Errors and ends of streams always
// come as replies. A shelved batch holds its credit, so the bound of Note [Loader credits]
// stands.
#include "actors/loader/batch_shelf.hpp"

namespace actorch::actors {

bool batch_shelf::offer(loaded_batch& b, const caf::strong_actor_ptr& from) {
  if (!b.error.empty() || b.end_of_data)
    return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (run_id_ == 0 || b.run_id != run_id_ || b.seq == wanted_)
    return false;
  items_.push_back({std::move(b), from});
  return true;
}

std::vector<batch_shelf::item> batch_shelf::wait_for(uint64_t run_id, int64_t seq) {
  std::vector<item> out;
  std::lock_guard<std::mutex> lock(mutex_);
  run_id_ = run_id;
  wanted_ = seq;
  out.swap(items_);
  return out;
}

} // namespace actorch::actors
