// serial_executor, the one ordered loop under the Gloo and NCCL groups: tasks run in posting
// order on one thread, and shutdown runs what was posted before it.
#include <catch2/catch.hpp>

#include <mutex>
#include <thread>
#include <vector>

#include "comm/backend/serial_executor.hpp"

using actorch::dist::serial_executor;

TEST_CASE("serial_executor runs tasks in posting order on one thread", "[comm][executor]") {
  const auto spin = GENERATE(std::chrono::microseconds(0), std::chrono::microseconds(50));
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::thread::id started;
  {
    serial_executor ex({.spin = spin, .on_start = [&] { started = std::this_thread::get_id(); }});
    // Posted from two threads: each thread's own tasks keep their order.
    std::mutex mu;
    std::thread other([&] {
      for (int i = 0; i < 100; ++i)
        ex.post([&, i] {
          std::lock_guard lock(mu);
          order.push_back(1000 + i);
          threads.push_back(std::this_thread::get_id());
        });
    });
    for (int i = 0; i < 100; ++i)
      ex.post([&, i] {
        std::lock_guard lock(mu);
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      });
    other.join();
  } // the destructor runs every task posted before it
  REQUIRE(order.size() == 200);
  int last_a = -1, last_b = 999;
  for (int v : order) {
    if (v < 1000) {
      CHECK(v == last_a + 1);
      last_a = v;
    } else {
      CHECK(v == last_b + 1);
      last_b = v;
    }
  }
  for (const auto& id : threads)
    CHECK(id == started);
  CHECK(started != std::this_thread::get_id());
}

TEST_CASE("serial_executor's shutdown waits for a running task and is idempotent",
          "[comm][executor]") {
  bool done = false;
  serial_executor ex({});
  ex.post([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done = true;
  });
  ex.shutdown();
  CHECK(done);
  ex.shutdown();
  CHECK(ex.queued() == 0);
}
