// Point-to-point ops (blocking, non-blocking, tags, any-source recv) and the work future:
// asynchronous completion, wait with a timeout, then() continuations, when_all, issue order.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "comm/backend/gloo/gloo_checks.hpp"
#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace std::chrono_literals;
using namespace actorch::test;
using V = std::vector<double>;

TEST_CASE("send and recv move a tensor between two ranks", "[comm][gloo][p2p]") {
  auto got = on_ranks<V>(2, [](int r, process_group_gloo& pg) {
    tensor t = r == 0 ? arange(6, {.dtype = dtype::float32}).view({2, 3}) : zeros({2, 3});
    if (r == 0)
      pg.send(t, 1, 0).wait();
    else
      pg.recv(t, 0, 0).wait();
    return values_of(t);
  });
  CHECK(got[1] == V{0, 1, 2, 3, 4, 5});
}

TEST_CASE("isend and irecv overlap and match by tag", "[comm][gloo][p2p]") {
  // Both ranks post a send and a recv before waiting: an exchange that deadlocks if sends were
  // serialised behind receives. Tags 7 and 9 are posted in opposite orders on the two ranks.
  auto got = on_ranks<V>(2, [](int r, process_group_gloo& pg) {
    const int peer = 1 - r;
    tensor a = full({3}, double(r + 1)), b = full({3}, double(r + 10));
    tensor ra = zeros({3}), rb = zeros({3});
    std::vector<work> ws;
    if (r == 0) {
      ws.push_back(pg.send(a, peer, 7));
      ws.push_back(pg.send(b, peer, 9));
      ws.push_back(pg.recv(rb, peer, 9));
      ws.push_back(pg.recv(ra, peer, 7));
    } else {
      ws.push_back(pg.recv(rb, peer, 9));
      ws.push_back(pg.recv(ra, peer, 7));
      ws.push_back(pg.send(b, peer, 9));
      ws.push_back(pg.send(a, peer, 7));
    }
    when_all(ws).wait();
    V out = values_of(ra);
    for (double x : values_of(rb))
      out.push_back(x);
    return out;
  });
  CHECK(got[0] == V{2, 2, 2, 11, 11, 11});
  CHECK(got[1] == V{1, 1, 1, 10, 10, 10});
}

TEST_CASE("recv from any rank reports the sender", "[comm][gloo][p2p]") {
  auto got = on_ranks<V>(3, [](int r, process_group_gloo& pg) {
    if (r != 0) {
      tensor t = full({1}, double(r * 100));
      pg.send(t, 0, 3).wait();
      return V{};
    }
    V out;
    for (int i = 0; i < 2; ++i) {
      tensor t = zeros({1});
      work w = pg.recv(t, -1, 3);
      const int src = w.source_rank();
      out.push_back(double(src));
      out.push_back(values_of(t)[0]);
    }
    return out;
  });
  REQUIRE(got[0].size() == 4);
  // Each message's value names its sender, whatever order they came in.
  CHECK(got[0][1] == got[0][0] * 100);
  CHECK(got[0][3] == got[0][2] * 100);
  CHECK(got[0][0] + got[0][2] == 3);
}

TEST_CASE("collectives run asynchronously, in issue order, and chain continuations",
          "[comm][gloo][work]") {
  auto got = on_ranks<V>(2, [](int r, process_group_gloo& pg) {
    tensor t = full({4}, double(r + 1));
    std::atomic<int> calls{0};
    std::atomic<bool> parent_done{false};
    // Three collectives issued back to back on the same tensor: only issue order gives
    // ((1+2) -> broadcast from 1 -> *2 via sum) = 6 on both ranks.
    work a = pg.all_reduce(t, reduce_op::sum);
    work b = pg.broadcast(t, 1);
    // Continuations run on the group's worker: no Catch assertion in there (not thread-safe).
    work c = pg.all_reduce(t, reduce_op::sum).then([&](const work& w) {
      parent_done = w.is_success(); // the parent is complete inside its continuation
      ++calls;
    });
    work d = c.then([&](const work&) { ++calls; });
    when_all({a, b, c, d}).wait(3000ms);
    V out = values_of(t);
    out.push_back(calls.load());
    out.push_back(a.is_completed() && b.is_completed() && d.is_success() && parent_done);
    return out;
  });
  for (const auto& g : got)
    CHECK(g == V{6, 6, 6, 6, 2, 1});
}

TEST_CASE("work reports failures through wait, exception and then", "[comm][work]") {
  work w;
  CHECK_FALSE(w.is_completed());
  CHECK_THROWS_WITH(w.wait(20ms), Catch::Contains("timed out after 20 ms"));
  std::string seen;
  work next = w.then([&](const work& p) { seen = p.exception() ? "failed" : "ok"; });
  w.mark_failed(std::make_exception_ptr(actorch::error("boom")));
  CHECK(seen == "failed");
  CHECK(w.is_completed());
  CHECK_FALSE(w.is_success());
  CHECK_THROWS_WITH(w.wait(), "boom");
  CHECK_THROWS_WITH(next.wait(), "boom");
  work thrower = work::completed().then([](const work&) { throw actorch::error("in callback"); });
  CHECK_THROWS_WITH(thrower.wait(), "in callback");
  CHECK_THROWS_WITH(
      when_all({work::completed(), work::failed(std::make_exception_ptr(actorch::error("second")))})
          .wait(),
      "second");
}

TEST_CASE("a work on a stream: wait orders the caller's stream, synchronize blocks the host",
          "[comm][work]") {
  // The bookkeeping of the nccl backend's works (Note [NCCL stream order]), with a counter
  // standing in for the stream wait.
  std::atomic<int> stream_waits{0};
  const tensor out = zeros({2});
  work w = work::on_stream({out}, 1, [&] { ++stream_waits; });
  w.wait();
  CHECK(stream_waits == 1);
  CHECK_FALSE(w.is_completed()); // the host did not wait
  CHECK(w.result().at(0).is_same(out));
  CHECK(w.source_rank() == 1);
  CHECK(stream_waits == 3); // result() and source_rank() wait() first
  CHECK_THROWS_WITH(w.wait(20ms), Catch::Contains("timed out after 20 ms"));
  std::atomic<bool> chained{false};
  work next = w.then([&](const work&) { chained = true; });
  next.wait(); // a continuation of a stream op is one too
  CHECK(stream_waits == 4);
  CHECK_FALSE(next.is_completed());
  std::thread producer([w] {
    std::this_thread::sleep_for(20ms);
    w.mark_completed();
  });
  w.synchronize();
  CHECK(w.is_success());
  next.synchronize(); // the host waits for the continuation itself
  CHECK(chained);
  CHECK(next.result().at(0).is_same(out)); // which passes the result on
  producer.join();
  work failed = work::on_stream({out}, -1, [&] { ++stream_waits; });
  failed.mark_failed(std::make_exception_ptr(actorch::error("the group failed")));
  CHECK_THROWS_WITH(failed.wait(), "the group failed");
  CHECK(stream_waits == 4); // a known failure is thrown, not waited for
}

TEST_CASE("a send and a recv that disagree on size fail clearly instead of crashing",
          "[comm][gloo][p2p][errors]") {
  // Gloo itself aborts the process when a send is larger than the recv; here the two never
  // match and both fail within the timeout, saying what must agree.
  const auto t0 = std::chrono::steady_clock::now();
  auto got = on_ranks<std::string>(
      2,
      [](int r, process_group_gloo& pg) {
        if (r == 0)
          return error_of([&] { pg.send(ones({8}), 1, 0).wait(); });
        tensor t = zeros({4});
        return error_of([&] { pg.recv(t, 0, 0).wait(); });
      },
      actorch::test::short_timeout(500));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THAT(got[0], Catch::Contains("send to rank 1 (tag 0, float32 [8]) failed") &&
                         Catch::Contains("must agree on tag, dtype and number of elements"));
  CHECK_THAT(got[1], Catch::Contains("recv from rank 0 (tag 0, float32 [4]) failed"));
}

TEST_CASE("a send and a recv whose sizes once hashed to one slot still do not match",
          "[comm][gloo][p2p][errors]") {
  // float32 sends of 6,266 elements and recvs of 1,096 on tag 0 shared a slot when the slot
  // held a 24-bit hash of dtype and size: the smaller recv aborted the process inside Gloo, the
  // larger one "succeeded" with stale data. Both directions must fail on both sides instead.
  for (const auto& [sent, wanted] : {std::pair<int64_t, int64_t>{6266, 1096}, {1096, 6266}}) {
    INFO("send of " << sent << " elements, recv of " << wanted);
    auto got = on_ranks<std::string>(
        2,
        [sent = sent, wanted = wanted](int r, process_group_gloo& pg) {
          if (r == 0)
            return error_of([&] { pg.send(ones({sent}), 1, 0).wait(); });
          tensor t = zeros({wanted});
          return error_of([&] { pg.recv(t, 0, 0).wait(); });
        },
        actorch::test::short_timeout(300));
    CHECK_THAT(got[0], Catch::Contains("send to rank 1 (tag 0, float32 [" + std::to_string(sent) +
                                       "]) failed"));
    CHECK_THAT(got[1], Catch::Contains("recv from rank 0 (tag 0, float32 [" +
                                       std::to_string(wanted) + "]) failed"));
  }
}

TEST_CASE("point-to-point slots hold tag, dtype and size exactly", "[comm][gloo][p2p]") {
  using gloo_checks::p2p_slot;
  CHECK(p2p_slot(0, zeros({6266})) != p2p_slot(0, zeros({1096})));
  CHECK(p2p_slot(0, zeros({4})) != p2p_slot(0, zeros({4}, {.dtype = dtype::int32})));
  CHECK(p2p_slot(1, zeros({4})) != p2p_slot(0, zeros({4})));
  CHECK(p2p_slot(70000, zeros({4})) != p2p_slot(70000 - 65536, zeros({4})));
  CHECK(p2p_slot(70000, zeros({4})) != p2p_slot(70000, zeros({5})));
  CHECK_THROWS_WITH(p2p_slot(70000, empty({int64_t(1) << 20})),
                    Catch::Contains("tag 70000 with 1048576 elements cannot be matched exactly"));
}
