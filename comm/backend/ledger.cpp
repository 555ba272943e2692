// The ledger of a process group's collectives (ledger.hpp).
//
// Note [Collective ledger]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A hang that names nobody is what distributed training users meet most: over TCP a rank's
// timeout names only the peer its own step waited for ("Timed out waiting 8000ms for recv ...
// peers [1, ..., 7]"), which in a ring is a neighbour of the rank that stopped, not that rank.
// So each rank keeps, in memory, the collective it last entered and last finished (sequence
// number, op, when), set by the group's collectives thread with no I/O (a lock, uncontended but
// for one reader a second). A thread of the ledger's own publishes that entry, with the time
// of publishing as a heartbeat, under the group's store key "ledger/<rank>" once per beat: one
// SET a second per rank, none per op. A rank whose collective has waited past the report delay
// reads every rank's entry and prints the roll call (once per collective) while it goes on
// waiting; the error at the group's timeout carries the same roll call, on the TCP path as on
// the shared-memory one. A rank that is stopped (SIGSTOP), hung in its own code or dead stops
// beating: its heartbeat's age says so; one alive but elsewhere (not in this collective) still
// beats; one on the reader's host whose process has exited is named so (the entry carries its
// pid and start time). Ages compare the publisher's wall clock with the reader's: across hosts they
// are off by the clocks' skew. A rank that destroys its group publishes a last entry saying it
// left, and the group's end waits up to kEndWait for it and joins the thread, so that no thread
// outlives the group: a process that forks afterwards (loader workers, the ranks of a test under
// TSan, which refuses threads in the child of a threaded parent) forks one thread. A hung store
// call (a stopped store host) leaves the thread behind after the wait. The store calls never run on
// the collectives thread; the roll call of an error is read within a budget, by a thread that
// may be left behind if the store is gone.
#include "comm/backend/ledger.hpp"

#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "base/text.hpp"
#include "comm/host_identity.hpp"

namespace actorch::dist {

namespace {

using milliseconds = std::chrono::milliseconds;

int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(ms) / 1000.0);
  return buf;
}

/// One rank's published entry. `host`, `pid` and `start` name its process (host_identity.hpp),
/// so that a reader on the same host can tell that it has exited since its last heartbeat.
struct entry {
  int64_t beat_ms = 0;
  int64_t entered = -1, entered_ms = 0;
  int64_t finished = -1, finished_ms = 0;
  int64_t left = 0; // 1: the rank destroyed its group (its last entry)
  int64_t pid = 0;
  std::string host, start;
  std::string entered_op, finished_op;

  std::string encode() const {
    std::ostringstream s;
    s << beat_ms << ' ' << entered << ' ' << entered_ms << ' ' << finished << ' ' << finished_ms
      << ' ' << left << ' ' << pid << '\n'
      << host << '\n'
      << start << '\n'
      << entered_op << '\n'
      << finished_op;
    return s.str();
  }
  static bool decode(const std::string& text, entry& e) {
    std::istringstream s(text);
    s >> e.beat_ms >> e.entered >> e.entered_ms >> e.finished >> e.finished_ms >> e.left >> e.pid;
    s.ignore(1);
    return bool(s) && std::getline(s, e.host) && std::getline(s, e.start) &&
           std::getline(s, e.entered_op) && (std::getline(s, e.finished_op), true);
  }
  /// Whether its process is known to have exited: it ran on this host, and no process of its
  /// pid and start time runs here now.
  bool exited() const {
    static const std::string here = host_id();
    return host == here && pid > 0 && process_start_time(pid_t(pid)) != start;
  }
};

} // namespace

struct collective_ledger::state {
  std::shared_ptr<store> st;
  int rank;
  std::vector<int> global_ranks;
  std::string where;
  options opts;
  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  bool ended = false; // run() has returned its last entry (or given up on it)
  entry mine;
  int64_t reported = -1; // the collective whose wait was last reported

  std::string key(size_t r) const { return "ledger/" + std::to_string(r); }

  /// "all_reduce #184 (DDP bucket 3)" from the entry's op ("all_reduce\tDDP bucket 3", the tag
  /// after a tab when the caller gave one) and sequence number.
  static std::string named(const std::string& op, int64_t seq) {
    const size_t tab = op.find('\t');
    if (tab == std::string::npos)
      return op + " #" + std::to_string(seq);
    return op.substr(0, tab) + " #" + std::to_string(seq) + " (" + op.substr(tab + 1) + ")";
  }

  /// Reads every rank's entry and says what it shows (see collective_ledger::roll_call).
  std::string read_roll_call() {
    const int64_t now = unix_ms();
    std::map<std::pair<int64_t, std::string>, std::pair<std::vector<int>, int64_t>> in_op;
    std::vector<std::string> others;
    for (size_t r = 0; r < global_ranks.size(); ++r) {
      const int g = global_ranks[r];
      entry e;
      if (!st->check({key(r)}) || !entry::decode(st->get(key(r)), e)) {
        others.push_back("rank " + std::to_string(g) +
                         " has published nothing (never started, or gone before its first "
                         "heartbeat)");
        continue;
      }
      const int64_t beat_age = now - e.beat_ms;
      if (e.exited() && !e.left) {
        std::string said = e.entered > e.finished ? "it was in " + named(e.entered_op, e.entered)
                           : e.finished >= 0
                               ? "it had last finished " + named(e.finished_op, e.finished)
                               : std::string("it had finished no collective");
        others.push_back("rank " + std::to_string(g) + " (pid " + std::to_string(e.pid) +
                         ") has exited; at its last heartbeat, " + seconds(beat_age) + " ago, " +
                         said);
        continue;
      }
      if (e.left) {
        others.push_back(
            "rank " + std::to_string(g) + " left the group (destroyed it) " + seconds(beat_age) +
            " ago" +
            (e.finished >= 0 ? ", after " + named(e.finished_op, e.finished) : std::string()));
        continue;
      }
      const bool silent = beat_age > 3 * opts.beat.count();
      if (e.entered > e.finished && !silent) {
        auto& [ranks, since] = in_op[{e.entered, e.entered_op}];
        ranks.push_back(g);
        since = std::max(since, now - e.entered_ms);
        continue;
      }
      std::string s = "rank " + std::to_string(g);
      if (e.entered > e.finished)
        s += " is in " + named(e.entered_op, e.entered) + " (for " + seconds(now - e.entered_ms) +
             ")";
      else if (e.finished >= 0)
        s += " last finished " + named(e.finished_op, e.finished) + " " +
             seconds(now - e.finished_ms) + " ago";
      else // its entry is as of its last heartbeat (once a beat): it may have finished some since
        s += " had finished no collective by its last heartbeat";
      s += ", heartbeat " + seconds(beat_age) + " ago";
      s += silent ? " (stopped or hung)" : " (alive, in none of this group's collectives)";
      others.push_back(s);
    }
    std::string out;
    for (const auto& s : others)
      out += (out.empty() ? "" : "; ") + s;
    for (const auto& [op, who] : in_op)
      out += (out.empty() ? "" : "; ") +
             (who.first.size() == 1 ? "rank " + join_numbers(who.first, ", ") + " is in "
                                    : "ranks " + join_numbers(who.first, ", ") + " are in ") +
             named(op.second, op.first) + " (for " + seconds(who.second) + ")";
    return out;
  }

  /// The publishing thread: a heartbeat per beat, and the report of a long wait.
  void run() {
    std::unique_lock lock(mu);
    while (!stop) {
      mine.beat_ms = unix_ms();
      const entry now = mine;
      lock.unlock();
      try {
        st->set(key(size_t(rank)), now.encode());
        const int64_t delay = opts.report_delay.count();
        if (delay > 0 && now.entered > now.finished && now.entered != reported &&
            unix_ms() - now.entered_ms >= delay) {
          reported = now.entered;
          const std::string calls = read_roll_call();
          std::fprintf(stderr, "actorch: %s on %s has waited %s: %s\n",
                       named(now.entered_op, now.entered).c_str(), where.c_str(),
                       seconds(unix_ms() - now.entered_ms).c_str(), calls.c_str());
        }
      } catch (const std::exception&) {
        // The store is gone or refused: the group's own ops will say so; keep beating.
      }
      lock.lock();
      wake.wait_for(lock, opts.beat, [&] { return stop; });
    }
    // The last entry says the rank left: a peer still waiting then knows why it hears nothing.
    mine.beat_ms = unix_ms();
    mine.left = 1;
    const entry last = mine;
    lock.unlock();
    try {
      st->set(key(size_t(rank)), last.encode());
    } catch (const std::exception&) {
    }
    lock.lock();
    ended = true;
    wake.notify_all();
  }
};

collective_ledger::collective_ledger(std::shared_ptr<store> st, int rank,
                                     std::vector<int> global_ranks, std::string where, options o)
    : state_(std::make_shared<state>()) {
  state_->mine.pid = ::getpid();
  state_->mine.host = host_id();
  state_->mine.start = process_start_time(::getpid());
  state_->st = std::move(st);
  state_->rank = rank;
  state_->global_ranks = std::move(global_ranks);
  state_->where = std::move(where);
  state_->opts = o;
  thread_ = std::thread([s = state_] { s->run(); });
}

collective_ledger::~collective_ledger() {
  std::unique_lock lock(state_->mu);
  state_->stop = true;
  state_->wake.notify_all();
  // Joined when its last entry is out within the wait, so that no thread outlives the group (a
  // process that forks once its group is gone, as loader workers or a test's ranks do, forks
  // one thread); detached when a store call hangs (a stopped master), which must not hold up
  // the group's end for longer.
  const bool ended = state_->wake.wait_for(lock, kEndWait, [&] { return state_->ended; });
  lock.unlock();
  if (ended)
    thread_.join();
  else
    thread_.detach();
}

void collective_ledger::enter(int64_t seq, const std::string& op) {
  std::lock_guard lock(state_->mu);
  state_->mine.entered = seq;
  state_->mine.entered_op = op;
  state_->mine.entered_ms = unix_ms();
}

void collective_ledger::finish(int64_t seq) {
  std::lock_guard lock(state_->mu);
  state_->mine.finished = seq;
  state_->mine.finished_op = state_->mine.entered_op;
  state_->mine.finished_ms = unix_ms();
}

std::string collective_ledger::roll_call(milliseconds budget) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  std::thread([s = state_, done] {
    try {
      done->set_value(s->read_roll_call());
    } catch (const std::exception& e) {
      done->set_value(std::string("the ledger could not be read: ") + e.what());
    }
  }).detach();
  if (result.wait_for(budget) != std::future_status::ready)
    return "the ledger could not be read within " + std::to_string(budget.count()) +
           " ms (the store's host may be gone)";
  return result.get();
}

} // namespace actorch::dist
