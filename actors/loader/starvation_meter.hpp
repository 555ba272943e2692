// The starvation figure (issue 42): how much of a consumer's step time goes to waiting for the
// next batch. The loader's advance() reports each wait to the meter; the time between a batch's
// delivery and the consumer's next request is the consumer's own work.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace actorch::data {

/// Timing of the current (or last) epoch as its consumer saw it.
struct loader_timing {
  /// From the start of the epoch to its first batch (workers starting, the first loads).
  double first_batch_s = 0;
  /// Time spent waiting for the batches after the first.
  double wait_s = 0;
  /// Time the consumer spent between receiving a batch and asking for the next.
  double work_s = 0;
  /// Batches delivered.
  int64_t batches = 0;
  /// The fraction of the consumer's step time (work + wait) spent waiting for the next batch:
  /// 0 for a loader that always has the next batch ready, near 1 for one the consumer always
  /// waits for. The first batch is not counted (first_batch_s), nor the end of the epoch.
  double starvation() const { return wait_s + work_s > 0 ? wait_s / (wait_s + work_s) : 0.0; }
};

namespace detail {

class starvation_meter {
public:
  using clock = std::chrono::steady_clock;

  void start_epoch() {
    timing_ = {};
    started_ = clock::now();
    delivered_.reset();
  }
  /// The consumer asks for the next batch now; returns the time of asking for delivered().
  clock::time_point asking() {
    const clock::time_point now = clock::now();
    if (delivered_)
      timing_.work_s += seconds(now - *delivered_);
    return now;
  }
  /// The batch asked for at `asked` is delivered now.
  void delivered(clock::time_point asked) {
    const clock::time_point now = clock::now();
    if (timing_.batches == 0)
      timing_.first_batch_s = seconds(now - started_);
    else
      timing_.wait_s += seconds(now - asked);
    ++timing_.batches;
    delivered_ = now;
  }
  const loader_timing& timing() const { return timing_; }

private:
  static double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }
  loader_timing timing_;
  clock::time_point started_{};
  std::optional<clock::time_point> delivered_;
};

} // namespace detail
} // namespace actorch::data
