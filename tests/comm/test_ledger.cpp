// The collective ledger's publishing thread ends with its group (Note [Collective ledger]):
// joined once the entry saying the rank left is out, so that a process forking after its group
// is gone (loader workers, tests' ranks) forks one thread; left behind, within a bound, when
// that store call hangs.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "comm/backend/ledger.hpp"
#include "tests/comm/forwarding_store.hpp"

using namespace actorch::dist;
using namespace std::chrono_literals;

namespace {

// A store whose set() takes `delay` once the test says so (a slow or stopped store host).
class slow_store final : public actorch::test::forwarding_store {
public:
  std::atomic<std::chrono::milliseconds> delay{0ms};

  void set(const std::string& key, const std::string& value) override {
    std::this_thread::sleep_for(delay.load());
    inner_.set(key, value);
  }
};

size_t threads() {
  const auto tasks = std::filesystem::directory_iterator("/proc/self/task");
  return size_t(std::distance(begin(tasks), end(tasks)));
}

// The threads this process runs once every thread started so far has ended (under TSan, its
// own background thread starts with the first other thread).
size_t threads_at_rest() {
  std::thread([] {}).join();
  return threads();
}

// The value's sixth field: 1 once the rank has left (the ledger's entry format).
bool says_left(const std::string& entry) {
  std::istringstream s(entry);
  int64_t field = 0;
  for (int i = 0; i < 6; ++i)
    s >> field;
  return bool(s) && field == 1;
}

} // namespace

TEST_CASE("a group's ledger thread has ended when the ledger is destroyed, its last entry out",
          "[comm][ledger]") {
  const size_t before = threads_at_rest();
  auto st = std::make_shared<slow_store>();
  {
    collective_ledger ledger(st, 0, {0}, "rank 0 of group [0]", {});
    st->wait({"ledger/0"}, 5000ms); // its first heartbeat
    CHECK(threads() == before + 1);
    st->delay = 100ms; // the last entry takes a while to get out
  }
  CHECK(threads() == before);
  CHECK(says_left(st->get("ledger/0")));
}

TEST_CASE("a ledger whose last store call hangs is destroyed within its bound and leaves its "
          "thread behind until the call returns",
          "[comm][ledger]") {
  const size_t before = threads_at_rest();
  auto st = std::make_shared<slow_store>();
  const auto start = std::chrono::steady_clock::now();
  {
    collective_ledger ledger(st, 0, {0}, "rank 0 of group [0]", {});
    st->wait({"ledger/0"}, 5000ms);
    st->delay = 3000ms; // a stopped store host
  }
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < collective_ledger::kEndWait + 1000ms);
  CHECK(threads() == before + 1);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (threads() > before && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  CHECK(threads() == before); // the detached thread ends with its call
  CHECK(says_left(st->get("ledger/0")));
}
