// The batch shelf: see Note [Batch shelf] in sampler_actor.cpp.
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

void batch_shelf::takes_since(std::vector<taken>& takes) {
  takes.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  takes.swap(taken_);
}

// Note [Task stealing] in sampler_actor.cpp. A posting stays for the whole run, so that an
// owner whose message comes after another worker took its task, or after the task was re-issued
// to another, knows to skip it: the batch is loaded once per posting. The first task of a worker
// that has not begun is left to it, so that every worker loads a batch and runs its
// worker_init_fn, as each of PyTorch's does, however fast the others are.

namespace {
bool started(const std::vector<bool>& started, int64_t w) {
  return size_t(w) < started.size() && started[size_t(w)];
}
void set_started(std::vector<bool>& started, int64_t w, bool on) {
  if (size_t(w) >= started.size())
    started.resize(size_t(w) + 1, false);
  started[size_t(w)] = on;
}
} // namespace

void batch_shelf::post(const index_batch& task, int64_t owner, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (task.run_id != posts_run_id_)
    clear_posts(task.run_id);
  posts_[task.seq] = {owner, -1, attempt};
  std::erase_if(open_, [&](const index_batch& t) { return t.seq == task.seq; });
  open_.push_back(task);
}

void batch_shelf::freeze(int64_t owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(open_, [&](const index_batch& t) {
    posting& p = posts_.at(t.seq);
    if (p.owner != owner)
      return false;
    p.holder = kFrozen;
    return true;
  });
  set_started(started_, owner, false); // its heir runs worker_init_fn again
}

void batch_shelf::drop_posts() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_posts(0);
}

void batch_shelf::clear_posts(uint64_t run_id) {
  posts_.clear();
  open_.clear();
  taken_.clear();
  posts_run_id_ = run_id;
}

bool batch_shelf::claim(const index_batch& task, int64_t me) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_started(started_, me, true);
  if (task.run_id != posts_run_id_)
    return true;
  const auto it = posts_.find(task.seq);
  if (it == posts_.end())
    return true;
  posting& p = it->second;
  if (p.owner != me)
    return false; // re-issued to another
  if (p.holder == -1) {
    p.holder = me;
    std::erase_if(open_, [&](const index_batch& t) { return t.seq == task.seq; });
  }
  return p.holder == me;
}

std::optional<index_batch> batch_shelf::next_for(uint64_t run_id, int64_t me) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (run_id != posts_run_id_ || open_.empty())
    return std::nullopt;
  // A worker yet to begin gets its first task, the earliest of its postings: sent first, it is
  // the first message it handles.
  auto first_of_waiting = [&](const index_batch& t, int64_t owner) {
    if (started(started_, owner))
      return false;
    for (const index_batch& u : open_)
      if (u.seq < t.seq && posts_.at(u.seq).owner == owner)
        return false;
    return true;
  };
  auto pick = open_.end();
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    const int64_t owner = posts_.at(it->seq).owner;
    if (owner == me)
      return std::nullopt; // its own next task is on its way
    if ((pick == open_.end() || it->seq < pick->seq) && !first_of_waiting(*it, owner))
      pick = it;
  }
  if (pick == open_.end())
    return std::nullopt;
  posting& p = posts_.at(pick->seq);
  p.holder = me;
  taken_.push_back({pick->seq, me, p.attempt});
  index_batch out = std::move(*pick);
  open_.erase(pick);
  return out;
}

} // namespace actorch::actors
