// work: shared state under a mutex; callbacks are collected while pending and run, outside the
// lock, by whoever completes the work.
#include "comm/work.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/error.hpp"

namespace actorch::dist {

struct work::state {
  mutable std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  std::atomic<bool> done_flag{false}; // done, readable without the lock (see spin_briefly)
  std::exception_ptr error;
  std::vector<tensor> result;
  int source_rank = -1;
  std::vector<std::function<void()>> callbacks;
  std::function<void()> stream_wait; // set for an op on a GPU stream (on_stream), then fixed
};

work::work() : state_(std::make_shared<state>()) {}

namespace {
// Back-to-back collectives complete within microseconds: yielding for a short while before
// sleeping on the condition variable saves the futex wake-up (tens of microseconds on a busy
// machine) without holding a core when nothing comes.
void spin_briefly(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (!flag.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}
} // namespace

work work::completed(std::vector<tensor> result, int source_rank) {
  work w;
  w.mark_completed(std::move(result), source_rank);
  return w;
}

work work::failed(std::exception_ptr e) {
  work w;
  w.mark_failed(std::move(e));
  return w;
}

work work::on_stream(std::vector<tensor> result, int source_rank,
                     std::function<void()> stream_wait) {
  ACTORCH_INTERNAL_ASSERT(stream_wait != nullptr, "work::on_stream without a stream wait");
  work w;
  w.state_->result = std::move(result);
  w.state_->source_rank = source_rank;
  w.state_->stream_wait = std::move(stream_wait);
  return w;
}

bool work::is_completed() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

bool work::is_success() const {
  std::lock_guard lock(state_->mu);
  return state_->done && !state_->error;
}

void work::wait() const {
  if (state_->stream_wait) {
    if (auto e = exception())
      std::rethrow_exception(e);
    state_->stream_wait();
    return;
  }
  synchronize();
}

void work::synchronize() const {
  spin_briefly(state_->done_flag);
  std::unique_lock lock(state_->mu);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error)
    std::rethrow_exception(state_->error);
}

void work::wait(std::chrono::milliseconds timeout) const {
  spin_briefly(state_->done_flag);
  std::unique_lock lock(state_->mu);
  ACTORCH_CHECK(state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; }),
                "work: wait timed out after ", timeout.count(), " ms (the op is still running)");
  if (state_->error)
    std::rethrow_exception(state_->error);
}

std::exception_ptr work::exception() const {
  std::lock_guard lock(state_->mu);
  return state_->error;
}

// A work that completed without failing needs no wait: its op has run, on any stream.
void work::wait_unless_done() const {
  if (!is_success())
    wait();
}

const std::vector<tensor>& work::result() const {
  wait_unless_done();
  return state_->result; // immutable once done, or from on_stream
}

int work::source_rank() const {
  wait_unless_done();
  return state_->source_rank;
}

void work::mark_completed(std::vector<tensor> result, int source_rank) const {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(state_->mu);
    ACTORCH_INTERNAL_ASSERT(!state_->done, "work completed twice");
    ACTORCH_INTERNAL_ASSERT(!state_->stream_wait || (result.empty() && source_rank == -1),
                            "a work on a stream got its result when queued");
    state_->done = true;
    state_->done_flag.store(true, std::memory_order_release);
    if (!state_->stream_wait) {
      state_->result = std::move(result);
      state_->source_rank = source_rank;
    }
    callbacks.swap(state_->callbacks);
  }
  state_->done_cv.notify_all();
  for (auto& cb : callbacks)
    cb();
}

void work::mark_failed(std::exception_ptr e) const {
  ACTORCH_INTERNAL_ASSERT(e != nullptr, "work failed without an exception");
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(state_->mu);
    ACTORCH_INTERNAL_ASSERT(!state_->done, "work completed twice");
    state_->error = std::move(e);
    state_->done = true;
    state_->done_flag.store(true, std::memory_order_release);
    callbacks.swap(state_->callbacks);
  }
  state_->done_cv.notify_all();
  for (auto& cb : callbacks)
    cb();
}

work work::then(std::function<void(const work&)> fn) const {
  // A continuation of an op on a stream keeps its stream semantics: its wait() orders the
  // caller's stream after the op, without waiting for `fn`.
  work next = state_->stream_wait
                  ? on_stream(state_->result, state_->source_rank, state_->stream_wait)
                  : work();
  auto parent = *this;
  auto run = [parent, next, fn = std::move(fn)] {
    try {
      fn(parent);
    } catch (...) {
      next.mark_failed(std::current_exception());
      return;
    }
    if (auto e = parent.exception())
      next.mark_failed(e);
    else if (next.state_->stream_wait)
      next.mark_completed(); // its result came from the parent when it was made
    else
      next.mark_completed(parent.state_->result, parent.state_->source_rank);
  };
  {
    std::unique_lock lock(state_->mu);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(run));
      return next;
    }
  }
  run();
  return next;
}

work when_all(const std::vector<work>& works) {
  if (works.empty())
    return work::completed();
  work all;
  auto remaining = std::make_shared<std::atomic<size_t>>(works.size());
  for (const auto& w : works) {
    w.then([works, all, remaining](const work&) {
      if (remaining->fetch_sub(1) != 1)
        return;
      std::vector<tensor> result;
      for (const auto& x : works) {
        if (auto e = x.exception()) {
          all.mark_failed(e);
          return;
        }
        const auto& r = x.result();
        result.insert(result.end(), r.begin(), r.end());
      }
      all.mark_completed(std::move(result));
    });
  }
  return all;
}

} // namespace actorch::dist
