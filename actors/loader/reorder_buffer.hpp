// The reorder buffer: with in_order, batches go to the consumer in sampler order; one that
// arrives early waits here until every earlier one went out (Note [In order] in
// reorder_buffer.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "actors/messages.hpp"

namespace actorch::actors {

class reorder_buffer {
public:
  /// A new run: the positions of plan.batches (an iterable run places each batch as it is
  /// sent: place()).
  void start(const epoch_plan& plan);
  /// Batch `seq` goes at position `pos`.
  void place(int64_t seq, size_t pos) { position_[seq] = pos; }
  size_t position(int64_t seq) const { return position_.at(seq); }

  /// Takes batch `seq` (`skip`: an end of stream, which holds a place but delivers nothing)
  /// and appends to `out` what may go out now, in order, stopping after an error that ends the
  /// run (not after a batch's own, delivery::recoverable).
  /// `passed_over(pos)`: nothing will come for `pos` (Note [Iterable runs]).
  void add(int64_t seq, delivery d, bool skip, const std::function<bool(size_t)>& passed_over,
           std::vector<delivery>& out);

  /// The position the consumer waits for next.
  size_t next() const { return next_; }
  bool empty() const { return ready_.empty(); }

private:
  struct entry {
    delivery d;
    bool skip = false;
  };
  std::unordered_map<int64_t, size_t> position_; // seq -> position
  std::map<size_t, entry> ready_;                // by position
  size_t next_ = 0;
};

} // namespace actorch::actors
