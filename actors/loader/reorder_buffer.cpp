// The reorder buffer (reorder_buffer.hpp).
//
// Note [In order]
// ~~~~~~~~~~~~~~~
// With in_order the coordinator delivers batches in sampler order: a batch that arrives early
// waits in `ready_` until every earlier one went out. It cannot deadlock: batches are sent in
// order, so the next one to deliver was always sent and holds a credit.
// Errors are delivered in order too (the consumer sees the batch before the failure first),
// except timeouts, which go out at once.
//
#include "actors/loader/reorder_buffer.hpp"

namespace actorch::actors {

void reorder_buffer::start(const epoch_plan& plan) {
  ready_.clear();
  position_.clear();
  for (size_t i = 0; i < plan.batches.size(); ++i)
    position_[plan.batches[i].first] = i;
  next_ = 0;
}

void reorder_buffer::add(int64_t seq, delivery d, bool skip,
                         const std::function<bool(size_t)>& passed_over,
                         std::vector<delivery>& out) {
  // An end_of_data at a place already passed over is not waited for.
  const size_t pos = position_.at(seq);
  if (!(skip && pos < next_))
    ready_.emplace(pos, entry{std::move(d), skip});
  for (;;) {
    if (ready_.empty() || ready_.begin()->first != next_) {
      if (!passed_over(next_))
        return;
      ++next_;
      continue;
    }
    auto& e = ready_.begin()->second;
    const bool err = !e.d.error.empty() && !e.d.recoverable; // the run ends there
    if (!e.skip)
      out.push_back(std::move(e.d));
    ready_.erase(ready_.begin());
    ++next_;
    if (err)
      return;
  }
}

} // namespace actorch::actors
