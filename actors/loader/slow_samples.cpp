// slow_samples: the marks, and the watcher that looks at them every quarter of the delay (at
// most every 0.25 s), so a report comes at most that late.
#include "actors/loader/slow_samples.hpp"

#include <algorithm>
#include <cstdio>

namespace actorch::actors {

// Note [Sample marks]
// ~~~~~~~~~~~~~~~~~~~
// Every sample a worker thread loads is marked twice, on entering and on leaving, so the mark
// must cost next to nothing: a shared map under one mutex, with an entry allocated per sample,
// cost about 8% of a two-worker epoch of 4 us samples in locks, allocation and cache-line
// traffic between the workers (perf, bench loader --passes 20). Each watched batch therefore
// owns a slot, registered with the watcher once per batch; the thread writes its sample's
// index, batch and start time there, with atomics, between two increments of a version
// (a sequence lock: odd while writing), and the watcher, four times per report delay, takes a
// slot's fields only when the version was even and unchanged around its reads, and reports a
// sample once: the version it reported is kept.

namespace {
thread_local slow_samples::slot* tls_slot = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
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

void slow_samples::slot::mark(int64_t i, int64_t s, int64_t t) {
  const uint64_t v = version.load(std::memory_order_relaxed);
  // Each field's release store orders the odd version before it; the even one comes after
  // them all. (No fences: GCC's ThreadSanitizer does not support them.)
  version.store(v + 1, std::memory_order_relaxed);
  index.store(i, std::memory_order_release);
  seq.store(s, std::memory_order_release);
  since_ns.store(t, std::memory_order_release);
  version.store(v + 2, std::memory_order_release);
}

slow_samples::batch_scope::batch_scope(slow_samples* watch, const std::string& who)
    : watch_(watch), previous_(tls_slot) {
  tls_slot = watch_ != nullptr ? &slot_ : nullptr; // no watch: this batch's samples go unmarked
  if (watch_ == nullptr)
    return;
  slot_.who = &who;
  std::lock_guard lock(watch_->mu_);
  watch_->slots_.push_back(&slot_);
}

slow_samples::batch_scope::~batch_scope() {
  tls_slot = previous_;
  if (watch_ == nullptr)
    return;
  std::lock_guard lock(watch_->mu_);
  std::erase(watch_->slots_, &slot_);
}

slow_samples::sample_scope::sample_scope(int64_t index, int64_t seq) : slot_(tls_slot) {
  if (slot_ != nullptr)
    slot_->mark(index, seq, now_ns());
}

slow_samples::sample_scope::~sample_scope() {
  if (slot_ != nullptr)
    slot_->mark(0, 0, 0);
}

void slow_samples::run() {
  const auto step = std::min(std::chrono::duration<double>(0.25), delay_ / 4);
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, step, [&] { return stop_; });
    const int64_t now = now_ns();
    for (slot* s : slots_) {
      const uint64_t v = s->version.load(std::memory_order_acquire);
      if (v % 2 == 1 || v == s->reported)
        continue;
      const int64_t index = s->index.load(std::memory_order_acquire);
      const int64_t seq = s->seq.load(std::memory_order_acquire);
      const int64_t since = s->since_ns.load(std::memory_order_acquire);
      if (s->version.load(std::memory_order_acquire) != v || since == 0)
        continue; // changed while read, or in no sample
      const double in_it = double(now - since) * 1e-9;
      if (in_it < delay_.count())
        continue;
      s->reported = v;
      std::fprintf(stderr, "%s has been in sample index %lld (batch %lld) for %.1f s\n",
                   s->who->c_str(), static_cast<long long>(index), static_cast<long long>(seq),
                   in_it);
      std::fflush(stderr);
    }
  }
}

} // namespace actorch::actors
