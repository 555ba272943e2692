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

// Note [Monitored barrier]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Through the store, not Gloo, so that a missing rank is named and the context survives:
// every rank checks in under "monitored_barrier/<n>/<rank>"; rank 0 waits for each in rank
// order until one deadline (`timeout` after it began) and posts the verdict under ".../done",
// which the others wait for. Errors say what torch's gloo says, first and word for word, since
// users' alerts and retries match its text and torch's own tests do ("[Rank 0]: Rank 1 failed
// to pass monitoredBarrier in 2000 ms", "Ranks 1, 2 failed ..." with wait_all_ranks, "Rank 0
// timed out in monitoredBarrier after 0 ms." when the time ran out before a rank was looked
// at, "Rank 2 successfully reached monitoredBarrier, but received errors while waiting for
// send/recv from rank 0" on the others); then actorch's detail, every missing rank by its
// global number whatever wait_all_ranks says. Unlike torch's, wait_all_ranks does not give
// each rank a whole timeout of its own: the barrier ends within `timeout` either way.
work process_group_gloo::monitored_barrier(milliseconds timeout, bool wait_all_ranks) {
  return impl_->enqueue("monitored_barrier", [this, timeout, wait_all_ranks](uint32_t) {
    const std::string base = "monitored_barrier/" + std::to_string(impl_->monitored_seq++) + "/";
    auto& st = *impl_->st;
    const auto global = [&](int r) { return global_ranks()[size_t(r)]; };
    if (rank() != 0) {
      st.set(base + std::to_string(rank()), "1");
      // Rank 0 may use the whole timeout collecting arrivals before it posts the verdict, so
      // waiting for the verdict with the same timeout would race it: wait twice as long. Only
      // a rank 0 that is gone or stuck makes this wait fail.
      std::string detail;
      try {
        st.wait({base + "done"}, 2 * timeout);
        const std::string verdict = st.get(base + "done");
        if (verdict == "ok")
          return std::vector<tensor>{};
        detail = verdict;
      } catch (const actorch::error&) {
        detail = "rank " + std::to_string(global(0)) + " (the group's rank 0) gave no verdict " +
                 "within " + std::to_string((2 * timeout).count()) + " ms";
      }
      ACTORCH_FAIL("Rank ", rank(), " successfully reached monitoredBarrier, but received errors ",
                   "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty ",
                   "rank.\n Original exception: \nmonitored_barrier: ", detail);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<int> missing, processed; // the group's ranks
    bool ran_out = false;                // the time was up before a missing rank was looked at
    for (int r = 1; r < size(); ++r) {
      const std::string key = base + std::to_string(r);
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= milliseconds(0) && !st.check({key})) {
        ran_out = ran_out || (missing.empty() && !wait_all_ranks);
        missing.push_back(r);
        continue;
      }
      try {
        st.wait({key}, std::max(left, milliseconds(1)));
        processed.push_back(r);
      } catch (const actorch::error&) {
        missing.push_back(r);
      }
    }
    if (missing.empty()) {
      st.set(base + "done", "ok");
      return std::vector<tensor>{};
    }
    std::vector<int> missing_global;
    for (const int r : missing)
      missing_global.push_back(global(r));
    const std::string ms = std::to_string(timeout.count()) + " ms";
    const std::string verdict = "ranks " + ranks_str(missing_global) + " of group " +
                                ranks_str(global_ranks()) + " did not arrive within " + ms;
    st.set(base + "done", verdict);
    std::string torchs;
    if (ran_out) {
      std::string done = processed.empty() ? "No ranks successfully processed in monitoredBarrier."
                                           : "Successfully processed ranks: ";
      for (size_t i = 0; i < processed.size(); ++i)
        done += (i ? ", " : "") + std::to_string(processed[i]);
      torchs = "Rank 0 timed out in monitoredBarrier after " + ms + ".\n" + done;
    } else if (wait_all_ranks) {
      std::string list;
      for (size_t i = 0; i < missing.size(); ++i)
        list += (i ? ", " : "") + std::to_string(missing[i]);
      torchs = "[Rank 0]: Ranks " + list + " failed to pass monitoredBarrier in " + ms;
    } else {
      torchs = "[Rank 0]: Rank " + std::to_string(missing[0]) +
               " failed to pass monitoredBarrier in " + ms;
    }
    ACTORCH_FAIL(torchs, "\nmonitored_barrier: ", verdict);
  });
}

} // namespace actorch::dist
