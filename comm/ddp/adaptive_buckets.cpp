// Adaptive buckets: adaptive_buckets.hpp.
#include "comm/ddp/adaptive_buckets.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "base/error.hpp"
#include "comm/collective_tag.hpp"
#include "core/ops/factory.hpp"
#include "core/trace.hpp"

namespace actorch::dist {

std::vector<int64_t> choose_bucket_boundaries(const std::vector<double>& ready,
                                              const std::vector<size_t>& bytes,
                                              const std::vector<int>& kinds, size_t cap_bytes,
                                              double latency, double seconds_per_byte) {
  const size_t n = bytes.size();
  ACTORCH_CHECK(ready.size() == n && kinds.size() == n,
                "choose_bucket_boundaries: ready, bytes and kinds differ in length (", ready.size(),
                ", ", n, ", ", kinds.size(), ")");
  // best[j]: the earliest end of the all-reduce of a bucket ending at position j (exclusive),
  // over every split of positions [0, j); from[j]: where that last bucket starts.
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(n + 1, inf);
  std::vector<size_t> from(n + 1, 0);
  best[0] = 0;
  double ready_max = 0; // a bucket launches only after every earlier bucket did
  for (size_t j = 1; j <= n; ++j) {
    ready_max = std::max(ready_max, ready[j - 1]);
    size_t sum = 0;
    for (size_t i = j; i-- > 0;) {
      if (kinds[i] != kinds[j - 1])
        break;
      sum += bytes[i];
      if (sum > cap_bytes && i + 1 < j)
        break;
      const double end = std::max(best[i], ready_max) + latency + double(sum) * seconds_per_byte;
      if (end < best[j]) {
        best[j] = end;
        from[j] = i;
      }
    }
  }
  std::vector<size_t> starts;
  for (size_t j = n; j > 0; j = from[j])
    starts.push_back(from[j]);
  std::vector<int64_t> bucket_of(n, 0);
  int64_t b = 0;
  for (auto it = starts.rbegin(); it != starts.rend(); ++it, ++b) {
    const size_t end = it + 1 == starts.rend() ? n : *(it + 1);
    for (size_t k = *it; k < end; ++k)
      bucket_of[k] = b;
  }
  return bucket_of;
}

double predicted_bucket_end(const std::vector<double>& ready, const std::vector<size_t>& bytes,
                            const std::vector<int64_t>& bucket_of, double latency,
                            double seconds_per_byte) {
  double end = 0, ready_max = 0;
  size_t sum = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    ready_max = std::max(ready_max, ready[k]);
    sum += bytes[k];
    if (k + 1 == bytes.size() || bucket_of[k + 1] != bucket_of[k]) {
      end = std::max(end, ready_max) + latency + double(sum) * seconds_per_byte;
      sum = 0;
    }
  }
  return end;
}

// Note [Adaptive buckets]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The static assignment (a 1 MiB first bucket, then 25 MiB ones) knows neither when each
// gradient gets ready nor what an all-reduce costs, so the last bucket, whose exchange
// cannot start before backward ends, is often large. After the rebuild, iterations
// kMeasureFrom .. kMeasureFrom + kMeasured - 1 record when each gradient got ready and when
// each bucket was launched and reduced. Then rank 0 fits the all-reduce cost as
// latency + bytes * seconds_per_byte (the latency: a one-element all-reduce's, timed once;
// per byte: the rest of the buckets' service times, each from the later of its launch and
// the previous bucket's end to its end, since the group runs them one at a time),
// takes each parameter's median ready time, and chooses the boundaries that end the last
// all-reduce earliest (choose_bucket_boundaries), unless the model predicts a tail after
// the last gradient shorter by less than a tenth or than one latency. The model ignores
// that an all-reduce takes CPU time from backward: where cores are few (two replicas on two
// cores), an exchange that overlaps backward slows it down as much as it hides. So the
// choice is a trial: its buckets run kMeasured iterations, and rank 0 keeps them only if
// its median iteration (forward to the end of the reduction) beats the baseline's by 2%;
// otherwise the baseline buckets come back. Each decision is broadcast (every replica must
// pair the same buckets) and applied in the forward of the same iteration on every
// replica. The buckets change which elements travel together, never the arithmetic: every
// element is still summed in rank order.

namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

} // namespace

std::shared_ptr<adaptive_buckets::timing>
adaptive_buckets::begin_iteration(int64_t iteration, bucket_layout& layout,
                                  const std::vector<size_t>& agreed) {
  if (phase_ == phase::settled)
    return nullptr;
  if (iteration == phase_start_ + kMeasured)
    end_phase(iteration, layout, agreed);
  if (iteration == kMeasureFrom)
    measure_latency();
  if (phase_ == phase::settled || iteration < phase_start_) // (end_phase may have settled it)
    return nullptr;
  auto t = std::make_shared<timing>();
  t->begin = clock::now();
  t->ready.resize(params_.size());
  t->launch.resize(layout.buckets().size());
  t->reduced.resize(layout.buckets().size());
  timings_.push_back(t);
  return t;
}

// The fixed cost of one all-reduce, from a few one-element ones (a collective: every replica
// runs it in the same forward); rank 0's median is what propose() uses.
void adaptive_buckets::measure_latency() {
  collective_tag tag("DDP bucket timing");
  std::vector<double> seen;
  tensor one = zeros({1}, {.device = group_.collective_device()});
  for (int k = 0; k < 5; ++k) {
    const auto t0 = clock::now();
    group_.all_reduce(one, reduce_op::sum).synchronize(); // the host's view of its end
    seen.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::nth_element(seen.begin(), seen.begin() + 2, seen.end());
  measured_latency_ = seen[2];
}

double adaptive_buckets::median_iteration() const {
  std::vector<double> v;
  for (const auto& t : timings_)
    v.push_back(std::chrono::duration<double>(t->end - t->begin).count());
  return median(v);
}

// Rank 0's candidate buckets from the baseline's timings, or the current ones when the
// model promises too little (by position in `agreed`).
std::vector<int64_t> adaptive_buckets::propose(const bucket_layout& layout,
                                               const std::vector<size_t>& agreed) const {
  const size_t n = agreed.size();
  std::vector<size_t> bytes(n);
  std::vector<int> kinds(n);
  std::map<std::pair<dtype, device>, int> kind_of; // a bucket holds one dtype on one device
  for (size_t k = 0; k < n; ++k) {
    const tensor& p = params_[agreed[k]];
    bytes[k] = size_t(p.nbytes());
    kinds[k] = kind_of.try_emplace({p.dtype(), p.device()}, int(kind_of.size())).first->second;
  }
  std::vector<clock::time_point> first; // each measured iteration's first gradient
  for (const auto& t : timings_)
    first.push_back(*std::min_element(t->ready.begin(), t->ready.end()));
  std::vector<double> ready(n, 0);
  for (size_t k = 0; k < n; ++k) {
    std::vector<double> seen;
    for (size_t m = 0; m < timings_.size(); ++m)
      seen.push_back(
          std::chrono::duration<double>(timings_[m]->ready[agreed[k]] - first[m]).count());
    ready[k] = median(seen);
  }
  // The latency is the one-element all-reduce's; the rest of every measured bucket's
  // service time is per byte. (A least-squares intercept over two or three bucket sizes,
  // whose times include backward competing for the CPU, came out at milliseconds.)
  double bytes_sum = 0, rest_sum = 0;
  for (const auto& t : timings_)
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const auto start = b == 0 ? t->launch[b] : std::max(t->launch[b], t->reduced[b - 1]);
      const double service = std::chrono::duration<double>(t->reduced[b] - start).count();
      bytes_sum += double(layout.buckets()[b].bytes);
      rest_sum += std::max(0.0, service - measured_latency_);
    }
  // With nothing measured beyond the latency, 10 GB/s: a memory copy's order, so that bytes
  // still weigh something in the choice.
  constexpr double kFallbackPerByte = 1e-10;
  const double per_byte = bytes_sum > 0 && rest_sum > 0 ? rest_sum / bytes_sum : kFallbackPerByte;
  const std::vector<int64_t> current = layout.choice(n);
  const auto candidate =
      choose_bucket_boundaries(ready, bytes, kinds, cap_bytes_, measured_latency_, per_byte);
  const double last = *std::max_element(ready.begin(), ready.end());
  const double now_tail =
      predicted_bucket_end(ready, bytes, current, measured_latency_, per_byte) - last;
  const double new_tail =
      predicted_bucket_end(ready, bytes, candidate, measured_latency_, per_byte) - last;
  return new_tail < 0.9 * now_tail && now_tail - new_tail > measured_latency_ ? candidate : current;
}

// At the forward of a phase's end: rank 0 decides, everyone applies (Note [Adaptive
// buckets]). A decision travels as [flag, bucket per position...].
void adaptive_buckets::end_phase(int64_t iteration, bucket_layout& layout,
                                 const std::vector<size_t>& agreed) {
  collective_tag tag("DDP bucket timing");
  const size_t n = agreed.size();
  tensor decision = zeros({int64_t(n + 1)}, {.dtype = dtype::int64});
  auto* d = decision.data_ptr<int64_t>();
  if (group_.rank() == 0) {
    if (phase_ == phase::baseline) {
      baseline_time_ = median_iteration();
      const auto candidate = propose(layout, agreed);
      d[0] = candidate != layout.choice(n) ? 1 : 0; // 1: try it
      std::copy(candidate.begin(), candidate.end(), d + 1);
    } else {
      d[0] = median_iteration() < 0.98 * baseline_time_ ? 1 : 0; // 1: keep the trial
    }
  }
  broadcast_from_rank0(group_, {decision});
  d = decision.data_ptr<int64_t>();
  if (group_.rank() == 0 && trace::enabled()) {
    const bool trial = phase_ == phase::trial;
    const double ms = median_iteration() * 1e3;
    trace::record("buckets", trial ? (d[0] ? "trial kept" : "trial reverted") : "baseline",
                  timings_.front()->begin, timings_.back()->end,
                  "\"buckets\": " + std::to_string(layout.buckets().size()) +
                      ", \"median_iteration_ms\": " + std::to_string(ms) +
                      (trial ? ", \"baseline_ms\": " + std::to_string(baseline_time_ * 1e3)
                             : ", \"trial\": " + std::to_string(d[0])));
  }
  if (phase_ == phase::baseline && d[0] == 1) {
    baseline_choice_ = layout.choice(n);
    layout.build_from_choice(agreed, d + 1);
    phase_ = phase::trial;
    phase_start_ = iteration;
  } else {
    if (phase_ == phase::trial && d[0] == 0)
      layout.build_from_choice(agreed, baseline_choice_.data());
    phase_ = phase::settled;
  }
  timings_.clear();
}

} // namespace actorch::dist
