// Bad inputs and failures of process_group_gloo: caller mistakes throw at once; tensors that
// differ across ranks fail the op on every rank with each rank's tensor named (and the group
// stays usable); a rank that never comes or dies makes the others fail within the timeout,
// naming the op and the peers, after which the group refuses work.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>

#include "comm/backend/gloo/pair_mesh.hpp"
#include "comm/backend/nccl/process_group_nccl.hpp"
#include "comm/collective_tag.hpp"
#include "comm/store/hash_store.hpp"
#include "comm/store/prefix_store.hpp"
#include "comm/store/tcp_store.hpp"
#include "core/ops/factory.hpp"
#include "tests/comm/ports.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/files.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace std::chrono_literals;
using namespace actorch::test;
using Catch::Contains;
using Catch::StartsWith;

TEST_CASE("caller mistakes throw at issue, naming the op and values", "[comm][gloo][errors]") {
  auto got = on_ranks<std::vector<std::string>>(2, [](int, process_group_gloo& pg) {
    std::vector<std::string> e;
    tensor f = zeros({2});
    tensor i = zeros({2}, {.dtype = dtype::int32});
    e.push_back(error_of([&] { pg.all_reduce(f, reduce_op::band); }));
    e.push_back(error_of([&] { pg.all_reduce(i, reduce_op::avg); }));
    e.push_back(error_of([&] { pg.broadcast(f, 2); }));
    std::vector<tensor> one{zeros({2})};
    e.push_back(error_of([&] { pg.all_gather(one, f); }));
    e.push_back(error_of([&] { pg.send(f, pg.rank(), 0); }));
    e.push_back(error_of([&] { pg.recv(f, 1 - pg.rank(), -1); }));
    tensor undefined;
    e.push_back(error_of([&] { pg.all_reduce(undefined, reduce_op::sum); }));
    pg.barrier().wait(); // the group is still usable
    return e;
  });
  const auto& e = got[0];
  CHECK_THAT(e[0], Contains("all_reduce: BAND needs an integer or bool tensor but got float32"));
  CHECK_THAT(e[1], Contains("all_reduce: AVG needs a floating-point tensor but got int32"));
  CHECK_THAT(e[2], Contains("broadcast: root 2 is outside the group's ranks [0, 2)"));
  CHECK_THAT(e[3], Contains("all_gather: outputs must hold 2 tensors (one per rank) but holds 1"));
  CHECK_THAT(e[4], Contains("send: rank 0 cannot send to itself"));
  CHECK_THAT(e[5], Contains("recv: tag must be >= 0 but got -1"));
  CHECK_THAT(e[6], Contains("all_reduce: the tensor is an undefined tensor"));
}

TEST_CASE("tensors that differ across ranks are reported with each rank's",
          "[comm][gloo][errors]") {
  auto got = on_ranks<std::vector<std::string>>(3, [](int r, process_group_gloo& pg) {
    std::vector<std::string> e;
    tensor t = zeros({r == 2 ? 5 : 4});
    e.push_back(error_of([&] { pg.all_reduce(t, reduce_op::sum).wait(); }));
    tensor d = zeros({4}, {.dtype = r == 1 ? dtype::float64 : dtype::float32});
    e.push_back(error_of([&] { pg.broadcast(d, 0).wait(); }));
    tensor s = zeros({4});
    e.push_back(error_of([&] {
      if (r == 0)
        pg.barrier().wait();
      else
        pg.all_reduce(s, reduce_op::max).wait();
    }));
    // After disagreements the group still works.
    tensor ok = full({2}, 1.0);
    pg.all_reduce(ok, reduce_op::sum).wait();
    e.push_back(std::to_string(values_of(ok)[0]));
    return e;
  });
  for (const auto& e : got) {
    CHECK_THAT(e[0], Contains("all_reduce: the ranks of group [0, 1, 2] issued different") &&
                         Contains("rank 0: all_reduce float32 [4] SUM") &&
                         Contains("rank 2: all_reduce float32 [5] SUM"));
    CHECK_THAT(e[1], Contains("rank 1: broadcast float64 [4] root 0") &&
                         Contains("rank 0: broadcast float32 [4] root 0"));
    CHECK_THAT(e[2], Contains("rank 0: barrier") && Contains("rank 1: all_reduce float32 [4] MAX"));
    CHECK(e[3] == std::to_string(3.0));
  }
}

TEST_CASE("all_to_all sizes that do not pair up are reported on every rank",
          "[comm][gloo][errors]") {
  auto got = on_ranks<std::string>(2, [](int r, process_group_gloo& pg) {
    std::vector<tensor> ins{zeros({2}), zeros({2})};
    std::vector<tensor> outs{zeros({2}), zeros({r == 1 ? 3 : 2})};
    const std::string e = error_of([&] { pg.all_to_all(outs, ins).wait(); });
    pg.barrier().wait(); // still usable
    return e;
  });
  for (const auto& e : got)
    CHECK_THAT(e, Contains("all_to_all: sizes do not match across ranks: rank 1 sends 2 "
                           "elements to rank 1, which expects 3"));
}

TEST_CASE("a rank that never joins the op fails the others within the timeout",
          "[comm][gloo][errors]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto got = on_ranks<std::vector<std::string>>(
      3,
      [](int r, process_group_gloo& pg) {
        std::vector<std::string> e;
        if (r == 2) { // issues nothing, but stays connected until the others gave up
          std::this_thread::sleep_for(1500ms);
          return e;
        }
        tensor t = zeros({4});
        e.push_back(error_of([&] { pg.all_reduce(t, reduce_op::sum).wait(); }));
        e.push_back(error_of([&] { pg.barrier().wait(); }));
        e.push_back(pg.broken_reason());
        return e;
      },
      short_timeout(500));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  for (int r = 0; r < 2; ++r) {
    const auto& e = got[size_t(r)];
    REQUIRE(e.size() == 3);
    std::string want = "all_reduce failed on rank ";
    want += std::to_string(r);
    want += " of group [0, 1, 2] after ";
    CHECK_THAT(e[0], Contains(want) && Contains(" ms (the group's timeout is 500 ms; peers [") &&
                         Contains("unusable"));
    CHECK_THAT(e[1], Contains("barrier refused") && Contains("all_reduce failed"));
    CHECK_FALSE(e[2].empty());
  }
}

TEST_CASE("a timeout's error names the rank that never came in its roll call, over TCP and "
          "over shared memory",
          "[comm][gloo][errors]") {
  // Over TCP each rank's timeout names only the peer its own step waited for; the roll call
  // (Note [Collective ledger]) names the rank that is elsewhere, from its heartbeat.
  for (const bool shm : {false, true}) {
    auto opts = short_timeout(2500);
    opts.shared_memory = shm;
    auto got = on_ranks<std::string>(
        3,
        [](int r, process_group_gloo& pg) -> std::string {
          tensor t = zeros({4});
          {
            collective_tag tag("warm-up");           // the caller's name for it, in the roll call
            pg.all_reduce(t, reduce_op::sum).wait(); // collective #0, on every rank
          }
          if (r == 2) { // alive, beating, but never joins #1 until the others gave up
            std::this_thread::sleep_for(3500ms);
            return "";
          }
          return error_of([&] { pg.all_reduce(t, reduce_op::sum).wait(); });
        },
        opts);
    for (int r = 0; r < 2; ++r) {
      INFO("shared memory " << shm << ", rank " << r << ": " << got[size_t(r)]);
      // (The other waiting rank is in #1 too, or has failed it and left.)
      CHECK_THAT(got[size_t(r)], Contains("Roll call: ") &&
                                     Contains("rank 2 last finished all_reduce #0 (warm-up) ") &&
                                     Contains("(alive, in none of this group's collectives)"));
    }
  }
}

TEST_CASE("a stopped rank is named, with its silent heartbeat, while the others wait and at "
          "their timeout",
          "[comm][gloo][errors]") {
  // Three processes over a TCP store and Gloo's TCP pairs; rank 2 gets a real SIGSTOP after
  // collective #0. Ranks 0 and 1 report the roll call after the report delay (on stderr), go on
  // waiting, and fail at the timeout with the same roll call.
  const auto dir = scratch_dir("stopped_rank");
  for (const auto& f : std::filesystem::directory_iterator(dir)) // a run before this one's
    std::filesystem::remove(f.path());
  const uint16_t port = free_port();
  std::vector<pid_t> pids;
  std::cout.flush();
  std::cerr.flush();
  for (int r = 0; r < 3; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string base = (dir / ("rank" + std::to_string(r))).string();
      std::FILE* err = std::freopen((base + ".stderr").c_str(), "w", stderr);
      std::string result = "no error";
      std::shared_ptr<tcp_store> st; // outlives the group: rank 0's is the store's host
      try {
        st = std::make_shared<tcp_store>("127.0.0.1", port, r == 0, 20000ms);
        auto opts = short_timeout(8000);
        opts.shared_memory = false;
        opts.report_delay = 4000ms;
        process_group_gloo pg(std::make_shared<prefix_store>("pg", st), r, 3, opts);
        tensor t = zeros({4});
        pg.all_reduce(t, reduce_op::sum).wait();
        write_file(base + ".ready", "");
        result = error_of([&] {
          for (int i = 0; i < 100; ++i)
            pg.all_reduce(t, reduce_op::sum).wait();
        });
      } catch (const std::exception& e) {
        result = std::string("threw: ") + e.what();
      }
      write_file(base + ".result", result);
      std::fflush(err);
      // Rank 0 hosts the store: it stays until rank 1 has its result, whose roll call reads
      // the ledger there (under ASan rank 0 once timed out first, left, and took the store
      // with it; under TSan the store, then made inside the try block, went with the group).
      const std::string rank1 = (dir / "rank1.result").string();
      for (int i = 0; r == 0 && i < 4000 && !std::filesystem::exists(rank1); ++i)
        std::this_thread::sleep_for(5ms);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  const std::string ready2 = (dir / "rank2.ready").string();
  for (int i = 0; i < 2000 && !std::filesystem::exists(ready2); ++i)
    std::this_thread::sleep_for(5ms);
  REQUIRE(std::filesystem::exists(ready2));
  ::kill(pids[2], SIGSTOP);
  for (int r = 0; r < 2; ++r)
    ::waitpid(pids[size_t(r)], nullptr, 0);
  ::kill(pids[2], SIGKILL);
  ::waitpid(pids[2], nullptr, 0);
  for (int r = 0; r < 2; ++r) {
    const std::string base = (dir / ("rank" + std::to_string(r))).string();
    const std::string result = read_file(base + ".result"), err = read_file(base + ".stderr");
    INFO("rank " << r << " result: " << result << "\nstderr: " << err);
    // Its last entry says where it was stopped (before #0 ended, after, or inside #1, as the
    // once-a-second publishing caught it): whichever, its clause names rank 2 silent.
    const auto named = [](const std::string& s) {
      const size_t at = s.find("rank 2 ");
      return at != std::string::npos &&
             s.substr(at, s.find(';', at) - at).find("(stopped or hung)") != std::string::npos;
    };
    CHECK_THAT(err, Contains("has waited "));
    CHECK(named(err));
    CHECK_THAT(result, Contains("all_reduce failed on rank " + std::to_string(r)) &&
                           Contains("Roll call: ")); // the other rank may have failed and left
    CHECK(named(result));
  }
}

TEST_CASE("a rank that dies mid-run makes the others fail within the timeout",
          "[comm][gloo][errors]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto got = on_ranks<std::string>(
      2,
      [](int r, process_group_gloo& pg) -> std::string {
        tensor t = full({1024}, 1.0);
        pg.all_reduce(t, reduce_op::sum).wait();
        if (r == 1)
          return ""; // returning destroys this rank's group: its connections close
        std::this_thread::sleep_for(100ms);
        return error_of([&] {
          for (int i = 0; i < 3; ++i)
            pg.all_reduce(t, reduce_op::sum).wait();
        });
      },
      short_timeout(1000));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THAT(got[0], Contains("all_reduce failed on rank 0 of group [0, 1]") &&
                         Contains("peers [1]") &&
                         Contains("rank 1 left the group (destroyed it) ")); // its ledger says so
}

TEST_CASE("monitored_barrier names the ranks that did not arrive", "[comm][gloo][errors]") {
  auto got = on_ranks<std::string>(
      3,
      [](int r, process_group_gloo& pg) -> std::string {
        if (r == 2) {
          std::this_thread::sleep_for(800ms);
          return "";
        }
        return error_of([&] { pg.monitored_barrier(300ms, false).wait(); });
      },
      short_timeout(2000));
  // torch's gloo's words first (Note [Monitored barrier]), then actorch's.
  CHECK_THAT(got[0], StartsWith("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 300 ms\n") &&
                         Contains("monitored_barrier: ranks [2] of group [0, 1, 2] did not "
                                  "arrive within 300 ms"));
  CHECK_THAT(got[1], StartsWith("Rank 1 successfully reached monitoredBarrier, but received "
                                "errors while waiting for send/recv from rank 0.") &&
                         Contains("ranks [2]"));
}

TEST_CASE("monitored_barrier says what torch's gloo says for each way it fails",
          "[comm][gloo][errors]") {
  // wait_all_ranks: every missing rank in torch's words; without it, the first in rank order,
  // and actorch's detail names them all.
  for (const bool all : {true, false}) {
    auto got = on_ranks<std::string>(
        3,
        [&](int r, process_group_gloo& pg) -> std::string {
          if (r != 0) {
            std::this_thread::sleep_for(700ms);
            return "";
          }
          return error_of([&] { pg.monitored_barrier(200ms, all).wait(); });
        },
        short_timeout(2000));
    CHECK_THAT(got[0], StartsWith(all ? "[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in "
                                        "200 ms"
                                      : "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 200 "
                                        "ms") &&
                           Contains("ranks [1, 2] of group [0, 1, 2] did not arrive"));
  }
  // No time at all: rank 0 ran out before it looked at a rank.
  auto got = on_ranks<std::string>(
      2,
      [](int r, process_group_gloo& pg) -> std::string {
        if (r != 0) {
          std::this_thread::sleep_for(300ms);
          return "";
        }
        return error_of([&] { pg.monitored_barrier(0ms, false).wait(); });
      },
      short_timeout(2000));
  CHECK_THAT(got[0], StartsWith("Rank 0 timed out in monitoredBarrier after 0 ms.\nNo ranks "
                                "successfully processed in monitoredBarrier."));
}

TEST_CASE("a rendezvous that misses a rank fails within the timeout", "[comm][gloo][errors]") {
  auto st = std::make_shared<hash_store>(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(process_group_gloo(st, 0, 2, short_timeout(300)),
                    Contains("process_group_gloo: rank 0 of group [0, 1] could not connect") &&
                        Contains("(the group's timeout is 300 ms)"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  CHECK_THROWS_WITH(process_group_gloo(st, 2, 2, short_timeout(300)),
                    Contains("rank 2 is outside [0, 2)"));
}

TEST_CASE("a peer that publishes its address and never connects fails the group within its "
          "timeout, not Gloo's five times it",
          "[comm][gloo][errors]") {
  // Rank 1 is played here: it publishes its pair's address for rank 0 (127.0.0.2, above rank
  // 0's 127.0.0.1, so rank 0 listens for it) and then never connects.
  auto st = std::make_shared<hash_store>(5s);
  auto as_rank1 = std::make_shared<prefix_store>("pg", st);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(9);
  sin.sin_addr.s_addr = htonl(0x7f000002);
  sockaddr_storage ss{};
  std::memcpy(&ss, &sin, sizeof sin);
  const auto bytes = gloo::transport::tcp::Address(ss, 0).bytes();
  as_rank1->set("pair/1-0/0", std::string(bytes.begin(), bytes.end()));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      process_group_gloo(std::make_shared<prefix_store>("pg", st), 0, 2, short_timeout(1000)),
      Contains("rank 0 of group [0, 1] could not connect") &&
          Contains("(the group's timeout is 1000 ms)") && Contains("Connect timeout"));
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO("failed after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                       << " ms");
  CHECK(took < 2500ms); // Gloo alone: 5000 ms
}

TEST_CASE("the addresses Gloo publishes in the store carry no bytes of the process beyond "
          "the socket address",
          "[comm][gloo]") {
  auto st = std::make_shared<hash_store>(5s);
  std::vector<std::thread> ranks;
  std::vector<std::exception_ptr> errors(2);
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        process_group_gloo pg(std::make_shared<prefix_store>("pg", st), r, 2, short_timeout(5000));
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : ranks)
    t.join();
  for (const auto& e : errors)
    REQUIRE(e == nullptr);
  const size_t record = gloo::transport::tcp::Address().bytes().size();
  REQUIRE(record == sizeof(sockaddr_storage) + sizeof(ssize_t));
  for (const char* key : {"pair/0-1/0", "pair/1-0/0"}) { // each rank's address for the other
    const std::string value = prefix_store("pg", st).get(key);
    REQUIRE(value.size() == record);
    sockaddr_storage ss{};
    std::memcpy(&ss, value.data(), sizeof ss);
    REQUIRE(ss.ss_family == AF_INET);
    const std::string tail = value.substr(sizeof(sockaddr_in), sizeof ss - sizeof(sockaddr_in));
    CHECK(tail == std::string(tail.size(), '\0'));
  }
}

TEST_CASE("gloo address records lose every byte past their sockaddr", "[comm][gloo][errors]") {
  // Records as Gloo writes them: a sockaddr_storage whose tail holds whatever was in memory
  // (0xAA here), then a sequence number, which must survive.
  constexpr size_t kRecord = sizeof(sockaddr_storage) + sizeof(ssize_t);
  const sa_family_t families[2] = {AF_INET, AF_INET6};
  const size_t used[2] = {sizeof(sockaddr_in), sizeof(sockaddr_in6)};
  for (size_t r = 0; r < 2; ++r) {
    std::string record(kRecord, char(0xAA));
    std::memcpy(record.data() + offsetof(sockaddr_storage, ss_family), &families[r],
                sizeof(sa_family_t));
    dist::scrub_address(record);
    CHECK(record.substr(used[r], sizeof(sockaddr_storage) - used[r]) ==
          std::string(sizeof(sockaddr_storage) - used[r], '\0'));
    CHECK(record.substr(offsetof(sockaddr_storage, ss_family) + sizeof(sa_family_t),
                        used[r] - offsetof(sockaddr_storage, ss_family) - sizeof(sa_family_t)) ==
          std::string(used[r] - offsetof(sockaddr_storage, ss_family) - sizeof(sa_family_t),
                      char(0xAA)));
    CHECK(record.substr(sizeof(sockaddr_storage)) == std::string(sizeof(ssize_t), char(0xAA)));
  }
  std::string odd(kRecord + 1, char(0xAA)); // not one record: not Gloo's, left alone
  dist::scrub_address(odd);
  CHECK(odd == std::string(kRecord + 1, char(0xAA)));
}

TEST_CASE("the nccl backend refuses clearly where it cannot run", "[comm][nccl][errors]") {
  // Without CUDA in the build, or without a GPU, creating the group fails and says why; with a
  // GPU, a one-rank group comes up and refuses CPU tensors.
  auto st = std::make_shared<hash_store>(2s);
  std::shared_ptr<process_group> g;
  const std::string e = error_of([&] { g = make_process_group_nccl(st, 0, 1, 2000ms); });
  if (g) {
    tensor t = zeros({1});
    CHECK_THROWS_WITH(g->all_reduce(t, reduce_op::sum), Contains("takes tensors on cuda:"));
  } else if (ACTORCH_HAVE_CUDA) {
    CHECK_THAT(e, Contains("nccl backend on rank 0: no CUDA device is available") &&
                      Contains("use the gloo backend for CPU tensors"));
  } else {
    CHECK_THAT(e, Contains("the nccl backend is not available: this build has no CUDA"));
  }
}

TEST_CASE("abort() fails a collective waiting on a silent peer at once, not at the timeout",
          "[comm][gloo][elastic]") {
  // Note [Aborting a Gloo group]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Rank 1 is alive but never joins the all_reduce (as a peer
  // behind a cut link); rank 0's waits until another thread aborts the group. Gloo's own
  // close() left it waiting for the whole timeout.
  auto opts = test::short_timeout(30000);
  opts.shared_memory = false;
  std::atomic<bool> rank0_done{false};
  const auto results = test::on_ranks<std::string>(
      2,
      [&](int rank, dist::process_group_gloo& pg) -> std::string {
        if (rank == 1) {
          while (!rank0_done)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return "";
        }
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          pg.abort();
        });
        const auto t0 = std::chrono::steady_clock::now();
        tensor t = ones({1024});
        const std::string what = test::error_of([&] { pg.all_reduce(t, reduce_op::sum).wait(); });
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        aborter.join();
        rank0_done = true;
        return what + " | after " + std::to_string(seconds) + " s";
      },
      opts);
  INFO(results[0]);
  CHECK_THAT(results[0], Contains("all_reduce failed"));
  const double seconds = std::stod(results[0].substr(results[0].rfind("after ") + 6));
  CHECK(seconds < 10); // the group's timeout is 30 s
}
