// The future every comm op returns (c10d's Work and its Future): is_completed(), wait() with a
// timeout, the exception of a failed op, and continuations with then()/when_all(). An
// asynchronous failure travels inside as an exception_ptr and wait() rethrows it. An op that
// runs on a GPU stream (the nccl backend) has CUDA stream semantics, as in PyTorch: wait()
// makes the caller's current stream wait for it and returns without blocking the host.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::dist {

class work {
public:
  /// A pending work; the producer completes it with mark_completed() or mark_failed().
  work();
  /// An already completed work holding `result`.
  static work completed(std::vector<tensor> result = {}, int source_rank = -1);
  /// An already failed work.
  static work failed(std::exception_ptr e);
  /// A pending work for an op queued on a GPU stream, whose `result` and `source_rank` are
  /// known once it is queued: wait() calls `stream_wait`, which makes the caller's current
  /// stream wait for the op. The producer completes it (mark_completed() with no result) once
  /// the stream has run the op.
  static work on_stream(std::vector<tensor> result, int source_rank,
                        std::function<void()> stream_wait);

  bool is_completed() const;
  /// True once completed without an exception.
  bool is_success() const;
  /// Blocks until the op is done, then rethrows its exception if it failed. For an op on a GPU
  /// stream: rethrows a failure known by now, else makes the caller's current stream wait for
  /// the op and returns at once (kernels queued after it see the result; so does the host
  /// through them, e.g. item() or cpu()).
  void wait() const;
  /// Blocks the host until the op is done, also for an op on a GPU stream (a barrier, a
  /// timing), then rethrows its exception if it failed.
  void synchronize() const;
  /// Blocks the host as synchronize(), for at most `timeout`: throws actorch::error when the
  /// op is still running after it (the op itself goes on).
  void wait(std::chrono::milliseconds timeout) const;
  /// The failure, or nullptr while running or after success.
  std::exception_ptr exception() const;
  /// The op's output tensors (e.g. all_gather's list); wait()s first unless it is done.
  const std::vector<tensor>& result() const;
  /// For recv: the rank the message came from (group rank); as result().
  int source_rank() const;

  /// Runs `fn(parent)` once this work is done (at once on this thread if it already is;
  /// otherwise on the thread that completes it, which is the group's worker: keep it short).
  /// The returned work completes when `fn` returns, with this work's result, or fails with
  /// this work's exception or with what `fn` threw. For an op on a stream it is one too: its
  /// wait() orders the caller's stream after the op (synchronize() waits for `fn`).
  work then(std::function<void(const work&)> fn) const;

  // Producer side. Completing twice is a bug (internal assert).
  void mark_completed(std::vector<tensor> result = {}, int source_rank = -1) const;
  void mark_failed(std::exception_ptr e) const;

private:
  struct state;
  void wait_unless_done() const;
  explicit work(std::shared_ptr<state> s) : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

/// A work that completes when every one of `works` has; fails with the first failure (in the
/// list's order) once all are done. Its result is the concatenation of their results.
work when_all(const std::vector<work>& works);

} // namespace actorch::dist
