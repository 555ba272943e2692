// Stream spans in host time (see timeline.hpp). The anchor event is waited for once, right
// after it is recorded on an otherwise idle point of the stream; the host clock read then
// stands for the anchor's GPU time, off by the wake-up latency (microseconds).
#include "core/cuda/timeline.hpp"

#include <chrono>

namespace actorch::cuda {

stream_timeline::stream_timeline(const stream& s, std::string lane)
    : on_(trace::enabled()), stream_(s), lane_(std::move(lane)) {}

void stream_timeline::begin(std::string name, std::string args) {
  if (!on_)
    return;
  if (!anchor_) {
    anchor_.emplace(true);
    anchor_->record(stream_);
    anchor_->synchronize();
    anchor_time_ = trace::clock::now();
  }
  open_.emplace();
  open_->name = std::move(name);
  open_->args = std::move(args);
  open_->begin.record(stream_);
}

void stream_timeline::end() {
  if (!on_ || !open_)
    return;
  open_->end.record(stream_);
  done_.push_back(std::move(*open_));
  open_.reset();
}

trace::clock::time_point stream_timeline::host_time(const event& e) const {
  const std::chrono::duration<double, std::milli> ms(anchor_->elapsed_time(e));
  return anchor_time_ + std::chrono::duration_cast<trace::clock::duration>(ms);
}

void stream_timeline::flush(bool wait) {
  while (!done_.empty() && (wait || done_.front().end.query())) {
    span& s = done_.front();
    s.end.synchronize();
    trace::record(lane_, s.name, host_time(s.begin), host_time(s.end), s.args);
    done_.pop_front();
  }
}

} // namespace actorch::cuda
