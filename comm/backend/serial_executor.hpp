// serial_executor: runs tasks one at a time, in the order they were posted, on one thread
// unless a task lets go of the order early (detach_current()). The backends' ordered loops are
// all this: the Gloo group's collectives (issue order is what keeps the ranks' ops matched),
// its point-to-point waiter, the NCCL group's ops.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actorch::dist {

class serial_executor {
public:
  struct options {
    /// How long the thread yields for the next task before it sleeps: a caller issuing ops
    /// back to back posts the next within microseconds, and yielding saves the futex wake-up
    /// (tens of microseconds on a busy machine) without holding a core when nothing comes.
    std::chrono::microseconds spin{0};
    /// Runs first on each of the executor's threads (for instance cudaSetDevice).
    std::function<void()> on_start = {};
  };

  explicit serial_executor(options opts);
  /// Runs the tasks already posted, then joins the threads (as shutdown()).
  ~serial_executor();
  serial_executor(const serial_executor&) = delete;
  serial_executor& operator=(const serial_executor&) = delete;

  /// Queues `task` behind those posted before it. A task must not throw: it reports its own
  /// failure (to a work, say). Posting after shutdown() is an internal error.
  void post(std::function<void()> task);

  /// Runs the tasks already posted, then joins the threads. Idempotent. An owner whose tasks
  /// use its members calls it first thing in its destructor.
  void shutdown();

  /// Tasks queued and not yet started.
  size_t queued() const { return queued_.load(std::memory_order_acquire); }

  /// From inside a task: the rest of it no longer holds the order, so the executor starts the
  /// next task now (on another thread: a new one if none is free) while this one finishes.
  /// For a task's end that runs code the executor's owner does not control, such as a torch
  /// Future's callbacks, which may post ops to the same executor and wait for them (torch's
  /// PowerSGD hook does): run on the one thread, they would wait forever. After it, the task
  /// must touch nothing the later tasks use. No effect outside a task, or called twice.
  static void detach_current();

private:
  void loop();
  void start_thread(); // with mu_ held

  options opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<size_t> queued_{0}; // tasks_.size(), readable without the lock
  bool stopping_ = false;
  bool running_ = false; // a task runs and has not detached: the next one waits
  size_t free_ = 0;      // threads not running a task (starting, spinning or asleep)
  std::vector<std::thread> threads_;
};

} // namespace actorch::dist
