// The batch shelf: where the range-for's own workers leave a batch its consumer is not waiting
// for yet (in_order, an earlier batch still loading), so that it wakes nobody; the consumer's
// thread collects the shelf before it blocks (Note [Batch shelf] in batch_shelf.cpp).
#pragma once

#include <mutex>
#include <vector>

#include "actors/messages.hpp"

namespace actorch::actors {

class batch_shelf {
public:
  /// A batch a worker left on the shelf instead of replying with it.
  struct item {
    loaded_batch batch;
    caf::strong_actor_ptr from; // the worker that loaded it, as the reply's sender would be
  };

  /// Worker side: keeps `b` (moving from it) and returns true if it belongs to the shelf's run
  /// and is not the batch the consumer waits for; never keeps an error or an end_of_data.
  /// false: reply with `b` as usual.
  bool offer(loaded_batch& b, const caf::strong_actor_ptr& from);

  /// Consumer side: from now on the consumer waits for batch `seq` of run `run_id` (run 0: no
  /// run, the shelf keeps nothing). Returns what the shelf held, of any run.
  /// @post the shelf is empty
  std::vector<item> wait_for(uint64_t run_id, int64_t seq);

private:
  std::mutex mutex_;
  uint64_t run_id_ = 0;
  int64_t wanted_ = -1;
  std::vector<item> items_;
};

} // namespace actorch::actors
