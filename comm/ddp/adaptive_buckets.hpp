// Adaptive buckets (Note [Adaptive buckets] in adaptive_buckets.cpp): after the rebuild, the
// reducer times a few iterations and rank 0 chooses bucket boundaries that end the last
// exchange earliest, keeping them only if a trial beats the baseline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/ddp/bucket_layout.hpp"

namespace actorch::dist {

class adaptive_buckets {
public:
  using clock = std::chrono::steady_clock;
  /// One measured iteration, filled in by the reducer.
  struct timing {
    clock::time_point begin, end;           // prepare, and the end of finalize
    std::vector<clock::time_point> ready;   // per parameter
    std::vector<clock::time_point> launch;  // per bucket
    std::vector<clock::time_point> reduced; // per bucket, written by the completing thread
  };

  adaptive_buckets(const std::vector<tensor>& params, replica_group& group, size_t cap_bytes)
      : params_(params), group_(group), cap_bytes_(cap_bytes) {}

  /// At the forward of `iteration` (buckets rebuilt, in `agreed` order): ends a phase when one
  /// is due (a collective: every replica calls it at the same iteration, and may find its
  /// buckets rebuilt), times the all-reduce's latency when due, and returns the record this
  /// iteration is to fill, or null when it is not measured.
  std::shared_ptr<timing> begin_iteration(int64_t iteration, bucket_layout& layout,
                                          const std::vector<size_t>& agreed);
  /// Whether the choice is made (the trial kept or reverted).
  bool settled() const { return phase_ == phase::settled; }

private:
  enum class phase { baseline, trial, settled };
  static constexpr int64_t kMeasureFrom = 2; // iteration 1 rebuilds, 2.. are measured
  static constexpr int64_t kMeasured = 3;    // iterations per phase

  void measure_latency();
  double median_iteration() const;
  std::vector<int64_t> propose(const bucket_layout& layout,
                               const std::vector<size_t>& agreed) const;
  void end_phase(int64_t iteration, bucket_layout& layout, const std::vector<size_t>& agreed);

  const std::vector<tensor>& params_;
  replica_group& group_;
  size_t cap_bytes_;
  phase phase_ = phase::baseline;
  int64_t phase_start_ = kMeasureFrom;
  std::vector<int64_t> baseline_choice_; // the rebuilt buckets, by position in `agreed`
  double baseline_time_ = 0;             // rank 0's median iteration with them
  std::vector<std::shared_ptr<timing>> timings_;
  double measured_latency_ = 0; // seconds
};

} // namespace actorch::dist
