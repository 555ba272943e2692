// The batch shelf: see Note [Batch shelf] in sampler_actor.cpp.
#include "actors/batch_shelf.hpp"

namespace actorch::actors {

bool batch_shelf::offer(loaded_batch& b, const caf::strong_actor_ptr& from) {
  if (!b.error.empty() || b.end_of_data)
    return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation_ == 0 || b.generation != generation_ || b.seq == wanted_)
    return false;
  items_.push_back({std::move(b), from});
  return true;
}

std::vector<batch_shelf::item> batch_shelf::wait_for(uint64_t generation, int64_t seq) {
  std::vector<item> out;
  std::lock_guard<std::mutex> lock(mutex_);
  generation_ = generation;
  wanted_ = seq;
  out.swap(items_);
  return out;
}

} // namespace actorch::actors
