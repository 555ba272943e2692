// The future every comm op returns (c10d's Work and its Future): is_completed(), wait() with a
// timeout, the exception of a failed op, and continuations with then()/when_all(). An
// asynchronous failure travels inside as an exception_ptr and wait() rethrows it.
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

  bool is_completed() const;
  /// True once completed without an exception.
  bool is_success() const;
  /// Blocks until the op is done, then rethrows its exception if it failed. With a timeout:
  /// throws actorch::error when the op is still running after it (the op itself goes on).
  void wait() const;
  void wait(std::chrono::milliseconds timeout) const;
  /// The failure, or nullptr while running or after success.
  std::exception_ptr exception() const;
  /// The op's output tensors (e.g. all_gather's list); waits for completion first.
  const std::vector<tensor>& result() const;
  /// For recv: the rank the message came from (group rank); waits for completion first.
  int source_rank() const;

  /// Runs `fn(parent)` once this work is done (at once on this thread if it already is;
  /// otherwise on the thread that completes it, which is the group's worker: keep it short).
  /// The returned work completes when `fn` returns, with this work's result, or fails with
  /// this work's exception or with what `fn` threw.
  work then(std::function<void(const work&)> fn) const;

  // Producer side. Completing twice is a bug (internal assert).
  void mark_completed(std::vector<tensor> result = {}, int source_rank = -1) const;
  void mark_failed(std::exception_ptr e) const;

private:
  struct state;
  explicit work(std::shared_ptr<state> s) : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

/// A work that completes when every one of `works` has; fails with the first failure (in the
/// list's order) once all are done. Its result is the concatenation of their results.
work when_all(const std::vector<work>& works);

} // namespace actorch::dist
