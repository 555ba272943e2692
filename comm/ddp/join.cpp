// join: the count of training replicas each iteration, the shadowing loop, and the final copy
// from the last joiner.
#include "comm/ddp/join.hpp"

#include <cstdio>
#include <exception>

#include "base/error.hpp"
#include "comm/collective_tag.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

namespace {

constexpr const char* kEarly = "Detected at least one rank that exhausted inputs. Throwing "
                               "across all ranks.";

// The number of replicas that called this with `training` (1 or 0), summed over all.
int64_t count_training(replica_group& g, bool training) {
  collective_tag tag("Join");
  tensor t = full({1}, training ? int64_t(1) : int64_t(0),
                  {.dtype = dtype::int64, .device = g.collective_device()});
  work w = g.all_reduce(t, reduce_op::sum);
  w.wait();
  return w.result().at(0).cpu().item<int64_t>();
}

} // namespace

join::join(std::vector<distributed_data_parallel*> joinables, bool enable,
           bool throw_on_early_termination)
    : enabled_(enable), throw_early_(throw_on_early_termination) {
  ACTORCH_CHECK(joinables.size() == 1 && joinables[0] != nullptr,
                "Join: expected one DistributedDataParallel, got ", joinables.size(),
                " joinables (actorch's Join takes DDP only; torch's also takes "
                "ZeroRedundancyOptimizer)");
  ddp_ = joinables[0];
  ACTORCH_CHECK(ddp_->join_context() == nullptr,
                "Join: this DistributedDataParallel is already in a Join context");
  if (enabled_)
    ddp_->set_join_context(this);
}

join::~join() {
  if (!finished_ && enabled_ && std::uncaught_exceptions() == 0) {
    try {
      finish();
    } catch (const std::exception& e) { // a destructor cannot throw it: call finish() for that
      std::fprintf(stderr, "Join: finish() failed when the context closed: %s\n", e.what());
    }
  }
  if (ddp_->join_context() == this)
    ddp_->set_join_context(nullptr);
}

void join::notify_training() {
  replica_group& g = ddp_->group();
  const int64_t training = count_training(g, true);
  ++iterations_;
  ACTORCH_CHECK(!throw_early_ || training == g.size(), kEarly);
}

void join::finish() {
  ACTORCH_CHECK(!finished_, "Join: finish() was already called");
  finished_ = true;
  if (!enabled_)
    return;
  ddp_->set_join_context(nullptr); // this replica's forwards are over
  replica_group& g = ddp_->group();
  if (throw_early_) {
    count_training(g, false); // the others' notify_training sees one short, and throws
    ACTORCH_FAIL(kEarly);
  }
  const ddp_options& o = ddp_->options();
  // Shadow each iteration of the replicas still training: their count, their buffer
  // broadcast, their buckets (zeros from here).
  while (count_training(g, false) > 0) {
    if (o.broadcast_buffers && ddp_->module().is_training() && g.size() > 1)
      ddp_->sync_buffers();
    ddp_->reducer().shadow_iteration();
  }
  // Everyone joined: the replica with the most iterations (the highest rank among equals) has
  // the final model; a max over iterations * size + rank names it.
  tensor key = full({1}, iterations_ * g.size() + g.rank(),
                    {.dtype = dtype::int64, .device = g.collective_device()});
  work w = g.all_reduce(key, reduce_op::max);
  w.wait();
  const int last = int(w.result().at(0).cpu().item<int64_t>() % g.size());
  std::vector<tensor> state = ddp_->module().parameters();
  for (const tensor& b : ddp_->module().buffers())
    state.push_back(b);
  no_grad guard;
  broadcast_from(g, state, last);
}

} // namespace actorch::dist
