// Store semantics, identical for every implementation: set/get/add/compare_set/check/wait/
// delete_key/num_keys, timeouts that name the missing keys, waking a waiter from another
// thread, prefix isolation, and file_store shared by two handles (as two processes would).
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <functional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "base/error.hpp"
#include "comm/store/file_store.hpp"
#include "comm/store/hash_store.hpp"
#include "comm/store/prefix_store.hpp"
#include "comm/store/tcp_store.hpp"
#include "tests/comm/ports.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace std::chrono_literals;

namespace {

std::string fresh_path(const std::string& name) {
  auto p = std::filesystem::path(ACTORCH_TEST_TMP) / name;
  std::filesystem::remove(p);
  return p.string();
}

void check_semantics(store& s) {
  SECTION("set then get returns the value, bytes included") {
    s.set("a", std::string("x\0y", 3));
    CHECK(s.get("a") == std::string("x\0y", 3));
    s.set("a", "z");
    CHECK(s.get("a") == "z");
  }
  SECTION("add counts from zero and returns the new value") {
    CHECK(s.add("n", 3) == 3);
    CHECK(s.add("n", -5) == -2);
    CHECK(s.get("n") == "-2");
    s.set("t", "text");
    CHECK_THROWS_WITH(s.add("t", 1), Catch::Contains("t'") && Catch::Contains("not an integer"));
  }
  SECTION("compare_set swaps only on the expected value") {
    CHECK(s.compare_set("c", "", "first") == "first");
    CHECK(s.compare_set("c", "wrong", "second") == "first");
    CHECK(s.compare_set("c", "first", "second") == "second");
    CHECK(s.get("c") == "second");
    CHECK(s.compare_set("absent", "x", "y") == "x");
    CHECK_FALSE(s.check({"absent"}));
  }
  SECTION("check, delete_key and num_keys") {
    const int64_t before = s.num_keys();
    s.set("k1", "1");
    s.set("k2", "2");
    CHECK(s.check({"k1", "k2"}));
    CHECK_FALSE(s.check({"k1", "k3"}));
    CHECK(s.num_keys() == before + 2);
    CHECK(s.delete_key("k1"));
    CHECK_FALSE(s.delete_key("k1"));
    CHECK_FALSE(s.check({"k1"}));
    CHECK(s.num_keys() == before + 1);
  }
  SECTION("wait times out naming the missing keys") {
    s.set("here", "1");
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(s.wait({"here", "missing"}, 150ms),
                      Catch::Contains("timed out after 150 ms") && Catch::Contains("missing]"));
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    s.set_timeout(100ms);
    CHECK_THROWS_WITH(s.get("never"), Catch::Contains("never]"));
  }
  SECTION("a waiter wakes when another thread sets the key") {
    std::thread setter([&] {
      std::this_thread::sleep_for(50ms);
      s.set("late", "v");
    });
    CHECK(s.get("late") == "v");
    setter.join();
  }
}

} // namespace

TEST_CASE("hash_store keeps c10d's store semantics", "[comm][store]") {
  hash_store s(2s);
  check_semantics(s);
}

TEST_CASE("file_store keeps c10d's store semantics", "[comm][store]") {
  file_store s(fresh_path("semantics.store"), 1, 2s);
  check_semantics(s);
}

TEST_CASE("prefix_store keeps the semantics and isolates its keys", "[comm][store]") {
  auto base = std::make_shared<hash_store>(2s);
  prefix_store s("p", base);
  check_semantics(s);
  SECTION("keys land under the prefix") {
    prefix_store other("q", base);
    s.set("same", "from p");
    other.set("same", "from q");
    CHECK(base->get("p/same") == "from p");
    CHECK(other.get("same") == "from q");
  }
}

TEST_CASE("tcp_store keeps c10d's store semantics over PyTorch's TCPStore protocol",
          "[comm][store]") {
  tcp_store master("127.0.0.1", 0, true, 2s);
  REQUIRE(master.port() != 0);
  SECTION("on the master") {
    check_semantics(master);
  }
  SECTION("on a client") {
    tcp_store client("127.0.0.1", master.port(), false, 2s);
    check_semantics(client);
  }
  SECTION("a client sees what another client wrote and wakes on it") {
    tcp_store a("127.0.0.1", master.port(), false, 2s);
    tcp_store b("127.0.0.1", master.port(), false, 2s);
    std::thread setter([&] {
      std::this_thread::sleep_for(50ms);
      a.set("shared", "from a");
    });
    CHECK(b.get("shared") == "from a");
    setter.join();
    CHECK(master.get("shared") == "from a");
  }
}

TEST_CASE("tcp_store fails clearly when no master answers", "[comm][store]") {
  const actorch::test::refused_port refused; // bound, never listening
  const auto port = uint16_t(refused.port());
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(tcp_store("127.0.0.1", port, false, 300ms),
                    Catch::Contains("no master answered at 127.0.0.1:" + std::to_string(port)) &&
                        Catch::Contains("within 300 ms"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("file_store is shared by every handle on one path", "[comm][store]") {
  const auto path = fresh_path("shared.store");
  {
    file_store a(path, 2, 2s);
    file_store b(path, 2, 2s);
    a.set("k", "v");
    CHECK(b.get("k") == "v");
    CHECK(b.add("n", 2) == 2);
    CHECK(a.add("n", 3) == 5);
    std::thread setter([&] {
      std::this_thread::sleep_for(50ms);
      b.set("late", "x");
    });
    CHECK(a.get("late") == "x");
    setter.join();
    CHECK(std::filesystem::exists(path));
  }
  // The last of the two users removed the file, so the path can serve a new run.
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a file_store a crashed job left behind is started afresh, a live one is not",
          "[comm][store]") {
  const std::string path = fresh_path("crashed.store");
  const pid_t pid = ::fork();
  if (pid == 0) { // a job's rank that dies without closing its store
    auto* s = new file_store(path, 2, 2s);
    s->set("gloo/address", "stale");
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(std::filesystem::exists(path));
  {
    file_store next(path, 2, 2s);
    CHECK_FALSE(next.check({"gloo/address"})); // the dead job's address is gone
    next.set("mine", "1");
    file_store peer(path, 2, 2s); // its user is alive: nothing is reset
    CHECK(peer.get("mine") == "1");
    CHECK(peer.num_keys() == 1);
  }
  CHECK_FALSE(std::filesystem::exists(path)); // the last of the 2 users removed it
}
