// The task board (task_board.hpp).
//
// Note [Task stealing]
// ~~~~~~~~~~~~~~~~~~~~
// A worker's tasks queue in its mailbox, two of them with the default prefetch_factor. When a
// worker is slow on a batch, the batch queued behind it waits as well; with in_order the
// consumer waits for both, holding the credits, so the other worker runs dry and idles, and
// once woken the kernel may put it on the busy worker's CPU (Note [Worker CPUs] in
// worker.cpp). So the coordinator posts each task for the loader's own map-style workers on
// this board (under its lock), and a worker done with a batch, with no task of its own on the
// way, takes the earliest task that no worker has begun (next_for), loads it, and sends it
// back as it does its own: to the shelf, or as a message to the host. (It may take the task an
// owner was about to begin, but not the first task of a worker yet to begin: every worker
// loads one and runs its worker_init_fn, as each of PyTorch's does, and an error there reaches
// the consumer. The cost: a worker that ran dry while all that was left were such first tasks
// is not woken when their owners begin; its next task comes from the coordinator.)
// A posting stays for the run, and the owner skips the task when its message for it comes
// after another took it (or after it was re-issued elsewhere): claim() says so, and each
// posting is loaded once. The coordinator learns who took what at each collect (or when a
// batch comes from a worker it did not send it to) and moves the task to the taker's queue,
// at its head (the taker had nothing left, so it is on it now), with a fresh clock (a late
// start, never an early one); a task sent to the taker meanwhile gets its clock when the taken
// one is back (coordinator.cpp, apply_takes; dispatcher::take). When a worker dies, its tasks
// are frozen on the board first (no longer taken), then the takes made before are collected,
// so that only the tasks it still held are re-issued, each replacing its posting, and none is
// both taken and re-issued. An iterable worker's tasks are its own stream's, and a user's
// source is opaque: neither is posted. PyTorch's workers take nothing from each other (each
// has its own index queue, filled round-robin); here which worker loads a batch may change,
// the batch does not (Note [Batch randomness]). When one CPU runs much slower than the other,
// the faster worker still waits: then all the credits are held by its own batches, done and
// waiting for the slow one's, which stealing cannot help. What it gained, measured:
// docs/performance.md, "Task stealing".
#include "actors/loader/task_board.hpp"

namespace actorch::actors {

void task_board::takes_since(std::vector<taken>& takes) {
  takes.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  takes.swap(taken_);
}

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

void task_board::post(const index_batch& task, int64_t owner, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (task.run_id != run_id_)
    clear_posts(task.run_id);
  posts_[task.seq] = {owner, -1, attempt};
  std::erase_if(open_, [&](const index_batch& t) { return t.seq == task.seq; });
  open_.push_back(task);
}

void task_board::freeze(int64_t owner) {
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

void task_board::drop_posts() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_posts(0);
}

void task_board::clear_posts(uint64_t run_id) {
  posts_.clear();
  open_.clear();
  taken_.clear();
  run_id_ = run_id;
}

bool task_board::claim(const index_batch& task, int64_t me) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_started(started_, me, true);
  if (task.run_id != run_id_)
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

std::optional<index_batch> task_board::next_for(uint64_t run_id, int64_t me) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (run_id != run_id_ || open_.empty())
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
