// GPU work in the trace (core/trace.hpp): spans on a CUDA stream, timed by events recorded on
// the stream and turned into host time against an anchor event, so that a trace shows what a
// stream ran when (the loader's copies next to the trainer's steps), not only when the host
// queued it. Does nothing while tracing is off.
#pragma once

#include <deque>
#include <optional>
#include <string>

#include "core/cuda/stream.hpp"
#include "core/trace.hpp"

namespace actorch::cuda {

class stream_timeline {
public:
  /// Spans of work queued on `s`, recorded on trace lane `lane`.
  stream_timeline(const stream& s, std::string lane);

  /// Marks where a span starts and ends in the stream's queue (an event each).
  void begin(std::string name, std::string args = {});
  void end();
  /// Records into the trace the spans the stream has finished (every span, waiting, with
  /// `wait`).
  void flush(bool wait = false);

private:
  struct span {
    // A constructor of its own: clang cannot use default member initializers of a class nested
    // in one not yet complete (std::optional<span>::emplace() below).
    span() : begin(true), end(true) {}
    std::string name, args;
    event begin, end;
  };
  trace::clock::time_point host_time(const event& e) const;

  bool on_;
  stream stream_;
  std::string lane_;
  std::optional<event> anchor_; // recorded and waited for once; its host time below
  trace::clock::time_point anchor_time_{};
  std::optional<span> open_;
  std::deque<span> done_;
};

} // namespace actorch::cuda
