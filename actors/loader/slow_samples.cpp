// slow_samples: the marks, and the watcher that looks at them every quarter of the delay (at
// most every 0.25 s), so a report comes at most that late.
#include "actors/loader/slow_samples.hpp"

#include <algorithm>
#include <cstdio>

namespace actorch::actors {

namespace {
thread_local slow_samples* tls_watch = nullptr;
thread_local const std::string* tls_who = nullptr;
} // namespace

slow_samples::slow_samples(double delay_s) : delay_(delay_s), watcher_([this] { run(); }) {}

slow_samples::~slow_samples() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  watcher_.join();
}

slow_samples::batch_scope::batch_scope(slow_samples* watch, const std::string& who)
    : previous_(tls_watch), previous_who_(tls_who) {
  tls_watch = watch;
  tls_who = &who;
}

slow_samples::batch_scope::~batch_scope() {
  tls_watch = previous_;
  tls_who = previous_who_;
}

slow_samples::sample_scope::sample_scope(int64_t index, int64_t seq) : watch_(tls_watch) {
  if (watch_ != nullptr)
    id_ = watch_->enter(*tls_who, index, seq);
}

slow_samples::sample_scope::~sample_scope() {
  if (watch_ != nullptr)
    watch_->leave(id_);
}

uint64_t slow_samples::enter(const std::string& who, int64_t index, int64_t seq) {
  std::lock_guard lock(mu_);
  const uint64_t id = ++next_id_;
  in_.emplace(id, entry{who, index, seq, std::chrono::steady_clock::now()});
  return id;
}

void slow_samples::leave(uint64_t id) {
  std::lock_guard lock(mu_);
  in_.erase(id);
}

void slow_samples::run() {
  const auto step = std::min(std::chrono::duration<double>(0.25), delay_ / 4);
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, step, [&] { return stop_; });
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, e] : in_) {
      const std::chrono::duration<double> in_it = now - e.since;
      if (e.reported || in_it < delay_)
        continue;
      e.reported = true;
      std::fprintf(stderr, "%s has been in sample index %lld (batch %lld) for %.1f s\n",
                   e.who.c_str(), static_cast<long long>(e.index), static_cast<long long>(e.seq),
                   in_it.count());
      std::fflush(stderr);
    }
  }
}

} // namespace actorch::actors
