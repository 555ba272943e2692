// serial_executor, the one ordered loop under the Gloo and NCCL groups: tasks run in posting
// order on one thread, and shutdown runs what was posted before it; a task that detaches lets
// the next ones run while it ends, and may wait for them.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
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

TEST_CASE("serial_executor: a task that detached may post a task and wait for it, as a torch "
          "Future's callback may",
          "[comm][executor]") {
  serial_executor ex({.spin = std::chrono::microseconds(50)});
  std::promise<bool> inner_ran;
  std::promise<bool> outer_saw;
  ex.post([&] {
    serial_executor::detach_current();
    serial_executor::detach_current(); // twice: no effect
    std::promise<void> inner_done;
    ex.post([&] {
      inner_ran.set_value(true);
      inner_done.set_value();
    });
    // On the executor's one thread this would wait forever; bounded, so the test fails instead.
    outer_saw.set_value(inner_done.get_future().wait_for(std::chrono::seconds(10)) ==
                        std::future_status::ready);
  });
  auto saw = outer_saw.get_future();
  REQUIRE(saw.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(saw.get());
  CHECK(inner_ran.get_future().get());
  serial_executor::detach_current(); // outside a task: no effect
}

TEST_CASE("serial_executor: after a detach, tasks still run one at a time in posting order, "
          "and shutdown waits for the detached end",
          "[comm][executor]") {
  std::vector<int> order;
  std::atomic<int> running{0}, most{0};
  std::atomic<bool> tail_done{false};
  std::promise<void> release;
  auto released = release.get_future().share();
  {
    serial_executor ex({});
    ex.post([&, released] {
      serial_executor::detach_current();
      released.wait(); // the tail outlasts the tasks below
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      tail_done = true;
    });
    for (int i = 0; i < 200; ++i)
      ex.post([&, i] {
        const int now = ++running;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        order.push_back(i);
        --running;
      });
    // They run while the first task's end waits (bounded: a failure, not a hang, without it).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ex.queued() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    CHECK(ex.queued() == 0);
    release.set_value();
  } // shutdown: waits for the detached end too
  CHECK(tail_done);
  CHECK(most == 1);
  REQUIRE(order.size() == 200);
  for (int i = 0; i < 200; ++i)
    CHECK(order[size_t(i)] == i);
}
