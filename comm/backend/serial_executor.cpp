#include "comm/backend/serial_executor.hpp"

#include <utility>

#include "base/error.hpp"

namespace actorch::dist {

namespace {

// The executor whose task this thread runs, and whether that task has detached.
thread_local serial_executor* t_executor = nullptr;
thread_local bool t_detached = false;

} // namespace

serial_executor::serial_executor(options opts) : opts_(std::move(opts)) {
  std::lock_guard lock(mu_);
  start_thread();
}

serial_executor::~serial_executor() {
  shutdown();
}

void serial_executor::start_thread() {
  ++free_;
  threads_.emplace_back([this] { loop(); });
}

void serial_executor::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    ACTORCH_INTERNAL_ASSERT(!stopping_, "serial_executor: a task was posted after shutdown");
    tasks_.push_back(std::move(task));
    queued_.store(tasks_.size(), std::memory_order_release);
    // Every thread is in a detached task's end (which may be waiting for this very task).
    if (!running_ && free_ == 0)
      start_thread();
  }
  cv_.notify_one();
}

void serial_executor::detach_current() {
  serial_executor* ex = t_executor;
  if (ex == nullptr || t_detached)
    return;
  t_detached = true;
  {
    std::lock_guard lock(ex->mu_);
    ex->running_ = false;
    if (ex->tasks_.empty())
      return; // a later post() finds a thread, or starts one
    if (ex->free_ == 0)
      ex->start_thread();
  }
  ex->cv_.notify_one();
}

void serial_executor::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // A thread ends once every task is done; one that ends a detached task may start another
  // thread first (detach_current), hence the loop.
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (threads_.empty())
        return;
      threads.swap(threads_);
    }
    for (std::thread& t : threads)
      t.join();
    threads.clear();
  }
}

void serial_executor::loop() {
  if (opts_.on_start)
    opts_.on_start();
  bool spin = false; // after a task: the caller may post the next within microseconds
  for (;;) {
    if (spin && opts_.spin.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + opts_.spin;
      while (queued() == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock,
               [&] { return (stopping_ && tasks_.empty()) || (!running_ && !tasks_.empty()); });
      if (tasks_.empty())
        return; // stopping, every task done (or ending on a detached thread)
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.store(tasks_.size(), std::memory_order_release);
      running_ = true;
      --free_;
    }
    t_executor = this;
    t_detached = false;
    task();
    t_executor = nullptr;
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      ++free_;
      spin = true; // detached too: a torch Future's callback is where the next op comes from
      if (!t_detached)
        running_ = false; // this thread takes the next task itself, or sleeps
      stopping = stopping_;
    }
    if (stopping)
      cv_.notify_all(); // the others may be waiting for this task to end
  }
}

} // namespace actorch::dist
