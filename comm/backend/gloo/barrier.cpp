// barrier (through Gloo) and monitored_barrier (through the store, naming missing ranks) of the
// Gloo group. See Note [Gloo group threads] in process_group_gloo.cpp.
#include <algorithm>

#include <gloo/barrier.h>

#include "comm/backend/gloo/process_group_gloo_impl.hpp"

namespace actorch::dist {

work process_group_gloo::barrier() {
  return impl_->enqueue("barrier", [this](uint32_t seq) {
    impl_->check_headers("barrier", seq, make_header(op_kind::barrier, nullptr, -1, -1));
    if (impl_->shm) // its header exchange is a barrier: every rank has arrived once it returns
      return std::vector<tensor>{};
    gloo::BarrierOptions o(impl_->ctx(seq));
    impl_->tag(o, seq);
    gloo::barrier(o);
    return std::vector<tensor>{};
  });
}

work process_group_gloo::monitored_barrier(milliseconds timeout) {
  // Through the store, not Gloo, so that a missing rank is named and the context survives:
  // every rank checks in under "monitored_barrier/<n>/<rank>"; rank 0 waits for each and posts
  // the verdict under ".../done", which the others wait for.
  return impl_->enqueue("monitored_barrier", [this, timeout](uint32_t) {
    const std::string base = "monitored_barrier/" + std::to_string(impl_->monitored_seq++) + "/";
    auto& st = *impl_->st;
    const auto global = [&](int r) { return global_ranks()[size_t(r)]; };
    if (rank() != 0) {
      st.set(base + std::to_string(rank()), "1");
      // Rank 0 may use the whole timeout collecting arrivals before it posts the verdict, so
      // waiting for the verdict with the same timeout would race it: wait twice as long. Only
      // a rank 0 that is gone or stuck makes this wait fail.
      try {
        st.wait({base + "done"}, 2 * timeout);
      } catch (const actorch::error&) {
        ACTORCH_FAIL("monitored_barrier: rank ", global(0), " (the group's rank 0) gave no ",
                     "verdict within ", (2 * timeout).count(), " ms");
      }
      const std::string verdict = st.get(base + "done");
      ACTORCH_CHECK(verdict == "ok", "monitored_barrier: ", verdict);
      return std::vector<tensor>{};
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<int> missing;
    for (int r = 1; r < size(); ++r) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        st.wait({base + std::to_string(r)}, std::max(left, milliseconds(1)));
      } catch (const actorch::error&) {
        missing.push_back(global(r));
      }
    }
    if (missing.empty()) {
      st.set(base + "done", "ok");
      return std::vector<tensor>{};
    }
    const std::string verdict = "ranks " + ranks_str(missing) + " of group " +
                                ranks_str(global_ranks()) + " did not arrive within " +
                                std::to_string(timeout.count()) + " ms";
    st.set(base + "done", verdict);
    ACTORCH_FAIL("monitored_barrier: ", verdict);
  });
}

} // namespace actorch::dist
