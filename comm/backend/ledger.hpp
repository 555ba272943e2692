// A process group's ledger of its collectives: which one each rank last entered and finished,
// published through the group's store with a heartbeat, so that a rank kept waiting can say who
// it waits for (the roll call) while it waits and in the error at its timeout. See Note
// [Collective ledger] in ledger.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store.hpp"

namespace actorch::dist {

class collective_ledger {
public:
  using milliseconds = std::chrono::milliseconds;
  struct options {
    /// A collective waiting longer than this prints the roll call on stderr (once) and goes on
    /// waiting; 0: never.
    milliseconds report_delay{10000};
    /// How often this rank publishes its entry (its heartbeat).
    milliseconds beat{1000};
  };

  /// Publishes this rank's entry under "ledger/<rank>" of `st` every options::beat, from a
  /// thread of its own that never holds up the group's ops. `where` ("rank 0 of group [0, 1]")
  /// starts its reports; `global_ranks` names the group's ranks in them.
  collective_ledger(std::shared_ptr<store> st, int rank, std::vector<int> global_ranks,
                    std::string where, options o);
  /// Stops publishing and ends the publishing thread once it has published the entry saying
  /// this rank left; waits at most kEndWait for that store call, then leaves the thread behind.
  ~collective_ledger();
  collective_ledger(const collective_ledger&) = delete;
  collective_ledger& operator=(const collective_ledger&) = delete;

  /// The group's collectives thread: collective `seq` (`op`: "all_reduce", or with the
  /// caller's tag after a tab, "all_reduce\tDDP bucket 3") begins / ends. Neither touches the
  /// network.
  void enter(int64_t seq, const std::string& op);
  void finish(int64_t seq);

  /// Every rank's state as its last published entry says ("rank 2 last finished all_reduce #7
  /// 9.8 s ago, heartbeat 9.8 s ago (stopped or hung); ranks 0, 1 are in all_reduce #8 (for
  /// 10.0 s)"), read from the store within `budget` (else a sentence saying it could not be).
  std::string roll_call(milliseconds budget);

  static constexpr milliseconds kEndWait{500};

  struct state; // shared with the publishing thread

private:
  std::shared_ptr<state> state_;
  std::thread thread_;
};

} // namespace actorch::dist
