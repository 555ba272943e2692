// serial_executor: one thread that runs tasks one at a time, in the order they were posted.
// The backends' ordered loops are all this: the Gloo group's collectives (issue order is what
// keeps the ranks' ops matched), its point-to-point waiter, the NCCL group's ops.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace actorch::dist {

class serial_executor {
public:
  struct options {
    /// How long the thread yields for the next task before it sleeps: a caller issuing ops
    /// back to back posts the next within microseconds, and yielding saves the futex wake-up
    /// (tens of microseconds on a busy machine) without holding a core when nothing comes.
    std::chrono::microseconds spin{0};
    /// Runs first on the thread (for instance cudaSetDevice).
    std::function<void()> on_start = {};
  };

  explicit serial_executor(options opts);
  /// Runs the tasks already posted, then joins the thread (as shutdown()).
  ~serial_executor();
  serial_executor(const serial_executor&) = delete;
  serial_executor& operator=(const serial_executor&) = delete;

  /// Queues `task` behind those posted before it. A task must not throw: it reports its own
  /// failure (to a work, say). Posting after shutdown() is an internal error.
  void post(std::function<void()> task);

  /// Runs the tasks already posted, then joins the thread. Idempotent. An owner whose tasks
  /// use its members calls it first thing in its destructor.
  void shutdown();

  /// Tasks queued and not yet started.
  size_t queued() const { return queued_.load(std::memory_order_acquire); }

private:
  void loop();

  options opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<size_t> queued_{0}; // tasks_.size(), readable without the lock
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace actorch::dist
