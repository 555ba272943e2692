// Where the range-for takes its batches from: the coordinator on the consumer's own thread
// (range_for_host, host.hpp), or, with num_workers = 0, the inline source (inline_source.hpp).
// Either way the consumer has one path: start a run, take deliveries until the end or an
// error, finish.
#pragma once

#include "actors/messages.hpp"

namespace actorch::actors {

class batch_feed {
public:
  virtual ~batch_feed() = default;
  /// Starts run `plan`, dropping whatever remains of the last.
  virtual void start(epoch_plan plan) = 0;
  /// The next delivery of the run, in order: a batch, an error, or the end of the epoch. The
  /// consumer takes it (a batch's credit goes back). Blocks until there is one; throws
  /// actorch::error when the feed itself stalls.
  virtual delivery next() = 0;
  /// The run ended (complete, abandoned or failed).
  virtual void finish() = 0;
};

} // namespace actorch::actors
