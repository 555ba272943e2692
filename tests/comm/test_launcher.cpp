// launch() (behind `actorch launch`) and spawn(): the environment each rank gets, rank-prefixed
// output, stopping the others when one fails or is killed, forwarding SIGTERM.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "base/error.hpp"
#include "comm/launch/launcher.hpp"
#include "tests/core/files.hpp"

using namespace actorch::dist;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {
launch_options sh(int n, const std::string& script) {
  launch_options o;
  o.nproc_per_node = n;
  o.master_port = 29555;
  o.command = {"/bin/sh", "-c", script};
  o.grace = 1000ms;
  return o;
}
} // namespace

TEST_CASE("launch sets torchrun's variables and prefixes output with the rank", "[comm][launch]") {
  std::ostringstream out, err;
  auto o = sh(2, "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR "
                 "$MASTER_PORT; printf partial");
  o.nnodes = 2;
  o.node_rank = 1;
  CHECK(launch(o, out, err) == 0);
  CHECK_THAT(out.str(), Contains("[rank2]: 2 0 4 2 127.0.0.1 29555\n") &&
                            Contains("[rank3]: 3 1 4 2 127.0.0.1 29555\n") &&
                            Contains("[rank3]: partial\n"));
  CHECK(err.str().empty());
}

TEST_CASE("launch stops the others when a rank fails and names it", "[comm][launch]") {
  std::ostringstream out, err;
  SECTION("non-zero exit") {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(launch(sh(3, "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 30"), out, err) != 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
    CHECK_THAT(err.str(), Contains("rank 1 exited with status 3; stopped the other ranks"));
  }
  SECTION("killed by a signal") {
    CHECK(launch(sh(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 30"), out, err) != 0);
    CHECK_THAT(err.str(), Contains("rank 0 was killed by signal 9"));
  }
  SECTION("a program that does not exist") {
    auto o = sh(1, "");
    o.command = {"/nonexistent/program"};
    CHECK(launch(o, out, err) != 0);
    CHECK_THAT(out.str(), Contains("[rank0]: actorch launch: cannot run '/nonexistent/program'"));
    CHECK_THAT(err.str(), Contains("rank 0 exited with status 127"));
  }
  CHECK_THROWS_WITH(launch(sh(0, "true"), out, err),
                    Contains("--nproc-per-node must be >= 1 but got 0"));
}

TEST_CASE("launch forwards SIGTERM to every rank", "[comm][launch]") {
  std::ostringstream out, err;
  // The signal goes out once both ranks run, so launch's handler is installed by then (it is
  // before the first fork): each rank leaves a file first.
  const std::filesystem::path dir = actorch::test::scratch_dir("launch_sigterm");
  std::filesystem::remove(dir / "0");
  std::filesystem::remove(dir / "1");
  std::atomic<bool> started{false};
  std::thread killer([&] {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!(std::filesystem::exists(dir / "0") && std::filesystem::exists(dir / "1")) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    started = std::filesystem::exists(dir / "0") && std::filesystem::exists(dir / "1");
    ::kill(::getpid(), SIGTERM);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = launch(sh(2, "touch " + dir.string() + "/$RANK; exec sleep 30"), out, err);
  killer.join();
  CHECK(started);
  CHECK(rc != 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK_THAT(err.str(), Contains("got signal 15"));
}

TEST_CASE("spawn runs fn in each rank and reports the one that failed", "[comm][launch]") {
  CHECK_NOTHROW(spawn(
      [](int rank) {
        ACTORCH_CHECK(std::getenv("RANK") == std::to_string(rank), "RANK");
        ACTORCH_CHECK(std::string(std::getenv("WORLD_SIZE")) == "2", "WORLD_SIZE");
      },
      2));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(spawn(
                        [](int rank) {
                          if (rank == 2)
                            throw actorch::error("bad rank");
                          std::this_thread::sleep_for(30s);
                        },
                        3, {.grace = 500ms}),
                    Contains("spawn: rank 2 exited with status 1; stopped the other ranks"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK_THROWS_WITH(spawn(
                        [](int rank) {
                          if (rank == 1)
                            ::kill(::getpid(), SIGKILL);
                        },
                        2),
                    Contains("rank 1 was killed by signal 9"));
}

TEST_CASE("launch passes --local_rank=N after the program with use_local_rank_arg",
          "[comm][launch]") {
  std::ostringstream out, err;
  auto o = sh(2, "");
  o.command = {"/bin/echo", "a", "--b"};
  SECTION("torch.distributed.launch's convention") {
    o.use_local_rank_arg = true;
    CHECK(launch(o, out, err) == 0);
    CHECK_THAT(out.str(), Contains("[rank0]: --local_rank=0 a --b\n") &&
                              Contains("[rank1]: --local_rank=1 a --b\n"));
  }
  SECTION("off by default (torchrun's: LOCAL_RANK only)") {
    CHECK(launch(o, out, err) == 0);
    CHECK_THAT(out.str(), Contains("[rank0]: a --b\n") && Contains("[rank1]: a --b\n"));
    CHECK_THAT(out.str(), !Contains("local_rank"));
  }
  SECTION("on a second node, N is the local rank, not the global one") {
    o.use_local_rank_arg = true;
    o.nnodes = 2;
    o.node_rank = 1;
    CHECK(launch(o, out, err) == 0);
    CHECK_THAT(out.str(), Contains("[rank2]: --local_rank=0 a --b\n") &&
                              Contains("[rank3]: --local_rank=1 a --b\n"));
  }
}
