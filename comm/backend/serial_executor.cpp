#include "comm/backend/serial_executor.hpp"

#include <utility>

#include "base/error.hpp"

namespace actorch::dist {

serial_executor::serial_executor(options opts) : opts_(std::move(opts)) {
  thread_ = std::thread([this] { loop(); });
}

serial_executor::~serial_executor() {
  shutdown();
}

void serial_executor::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    ACTORCH_INTERNAL_ASSERT(!stopping_, "serial_executor: a task was posted after shutdown");
    tasks_.push_back(std::move(task));
    queued_.store(tasks_.size(), std::memory_order_release);
  }
  cv_.notify_one();
}

void serial_executor::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable())
    thread_.join();
}

void serial_executor::loop() {
  if (opts_.on_start)
    opts_.on_start();
  for (;;) {
    if (opts_.spin.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + opts_.spin;
      while (queued() == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty())
        return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.store(tasks_.size(), std::memory_order_release);
    }
    task();
  }
}

} // namespace actorch::dist
