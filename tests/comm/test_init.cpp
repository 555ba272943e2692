// init_process_group with each init method (ranks as real processes through spawn), new_group
// subsets, the rank queries, and every bad input: malformed URL, rank outside [0, world), a
// missing variable, a master that never answers. Also a rank killed mid-collective.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "comm/store/hash_store.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/ops/factory.hpp"
#include "core/optim/sgd.hpp"
#include "tests/comm/ports.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace std::chrono_literals;
using actorch::test::error_of;
using Catch::Contains;

namespace {

// What every rank checks after init: its rank, the world, a sum over ranks, a subgroup.
void exercise(int rank, int world) {
  ACTORCH_CHECK(is_initialized(), "not initialized");
  ACTORCH_CHECK(get_rank() == rank && get_world_size() == world, "rank ", get_rank(), " world ",
                get_world_size());
  ACTORCH_CHECK(get_backend() == "gloo", get_backend());
  tensor t = full({3}, double(rank + 1));
  all_reduce(t);
  const double want = world * (world + 1) / 2.0;
  ACTORCH_CHECK(actorch::test::values_of(t) == std::vector<double>(3, want), "sum ", t);
  // new_group of the even ranks: the odd ones call it too and are not members.
  std::vector<int> evens;
  for (int r = 0; r < world; r += 2)
    evens.push_back(r);
  group g = new_group(evens);
  if (rank % 2 == 0) {
    ACTORCH_CHECK(get_rank(g) == rank / 2, "group rank ", get_rank(g));
    tensor u = full({1}, double(rank));
    all_reduce(u, reduce_op::max, g);
    ACTORCH_CHECK(u.item<double>() == double(evens.back()), "group max ", u);
    // src is a global rank
    tensor b = full({1}, double(rank));
    broadcast(b, evens.back(), g);
    ACTORCH_CHECK(b.item<double>() == double(evens.back()), "group broadcast ", b);
  } else {
    // torch's: -1 for both, and every op a no-op that leaves the tensors as they were.
    ACTORCH_CHECK(get_rank(g) == -1, "non-member rank ", get_rank(g));
    ACTORCH_CHECK(get_world_size(g) == -1, "non-member world size ", get_world_size(g));
    tensor mine = full({3}, double(rank));
    all_reduce(mine, reduce_op::sum, g);
    broadcast(mine, evens.back(), g);
    std::vector<tensor> parts;
    all_gather(parts, mine, g);
    barrier(g);
    monitored_barrier(g);
    ACTORCH_CHECK(parts.empty() && actorch::test::values_of(mine) == std::vector<double>(3, rank),
                  "a non-member's op changed its tensors: ", mine);
    ACTORCH_CHECK(recv(mine, evens.back(), g) == -1, "a non-member's recv");
  }
  // Point-to-point with global ranks, any-source recv returning the global sender.
  if (rank == 0) {
    for (int i = 1; i < world; ++i) {
      tensor m = zeros({1});
      const int src = recv(m);
      ACTORCH_CHECK(m.item<double>() == src * 10.0, "from ", src, ": ", m);
    }
  } else {
    send(full({1}, rank * 10.0), 0);
  }
  // DistributedSampler's num_replicas and rank come from the default group when not given.
  data::distributed_sampler shard(10, std::nullopt, std::nullopt, false);
  ACTORCH_CHECK(shard.size() == (10 + world - 1) / world && shard.indices().at(0) == rank,
                "DistributedSampler from the default group: size ", shard.size(), ", first index ",
                shard.indices().at(0));
  barrier();
  destroy_process_group();
  ACTORCH_CHECK(!is_initialized(), "still initialized");
  const std::string no_group = error_of([] { data::distributed_sampler(10); });
  ACTORCH_CHECK(no_group.find("num_replicas was not given and the default process group is not "
                              "initialized") != std::string::npos,
                no_group);
}

struct env_guard { // restores the variables a test sets
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const char* k, const std::string& v) {
    const char* old = std::getenv(k);
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(k, v.c_str(), 1);
  }
  void unset(const char* k) {
    const char* old = std::getenv(k);
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    ::unsetenv(k);
  }
  ~env_guard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      it->second ? ::setenv(it->first.c_str(), it->second->c_str(), 1)
                 : ::unsetenv(it->first.c_str());
  }
};

} // namespace

TEST_CASE("init_process_group with env:// runs real processes", "[comm][init]") {
  env_guard env;
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(free_port()));
  CHECK_NOTHROW(spawn(
      [](int rank) {
        init_process_group({.timeout = 5000ms});
        exercise(rank, 3);
      },
      3));
}

TEST_CASE("init_process_group with tcp:// and file://", "[comm][init]") {
  SECTION("tcp://host:port with rank and world_size in the query") {
    const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
    CHECK_NOTHROW(spawn(
        [&](int rank) {
          init_process_group(
              {.init_method = url + "?rank=" + std::to_string(rank) + "&world_size=2",
               .timeout = 5000ms});
          exercise(rank, 2);
        },
        2));
  }
  SECTION("file:///path, ranks from OMPI_COMM_WORLD_*") {
    const auto path = std::filesystem::path(ACTORCH_TEST_TMP) / "init.store";
    std::filesystem::remove(path);
    CHECK_NOTHROW(spawn(
        [&](int rank) {
          ::unsetenv("RANK");
          ::unsetenv("WORLD_SIZE");
          ::setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
          ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
          init_process_group({.init_method = "file://" + path.string(), .timeout = 5000ms});
          exercise(rank, 2);
        },
        2));
    CHECK_FALSE(std::filesystem::exists(path)); // the last rank removed it
  }
}

TEST_CASE("init_process_group rejects bad input clearly and in time", "[comm][init][errors]") {
  env_guard env;
  env.unset("RANK");
  env.unset("WORLD_SIZE");
  env.unset("OMPI_COMM_WORLD_RANK");
  env.unset("OMPI_COMM_WORLD_SIZE");
  env.unset("SLURM_PROCID");
  env.unset("SLURM_NTASKS");
  env.unset("MASTER_ADDR");
  env.unset("MASTER_PORT");
  auto init = [](init_options o) { return error_of([&] { init_process_group(o); }); };
  CHECK_THAT(init({.init_method = "env://",
                   .world_size = 1,
                   .rank = 0,
                   .store = std::make_shared<hash_store>()}),
             Contains("cannot specify both init_method ('env://') and store"));
  CHECK_THAT(init({.init_method = "udp://x:1", .world_size = 1, .rank = 0}),
             Contains("unsupported init_method 'udp://x:1'"));
  CHECK_THAT(init({.init_method = "tcp://127.0.0.1", .world_size = 1, .rank = 0}),
             Contains("malformed init_method 'tcp://127.0.0.1' (expected tcp://host:port)"));
  CHECK_THAT(init({.init_method = "tcp://127.0.0.1:99999", .world_size = 1, .rank = 0}),
             Contains("is out of range: got '99999', expected 1..65535"));
  CHECK_THAT(init({.init_method = "tcp://127.0.0.1:12a", .world_size = 1, .rank = 0}),
             Contains("must be an integer, but got '12a'"));
  CHECK_THAT(init({.init_method = "file://relative", .world_size = 1, .rank = 0}),
             Contains("expected file:///absolute/path"));
  CHECK_THAT(init({.world_size = 2, .rank = 2}),
             Contains("rank 2 (from the rank argument) is outside [0, 2)"));
  CHECK_THAT(init({.world_size = 2}), Contains("the rank is unknown: pass rank or set RANK"));
  CHECK_THAT(init({}), Contains("the world size is unknown"));
  CHECK_THAT(init({.world_size = -3, .rank = 0}),
             Contains("world_size must not be negative (-1: from the environment), but got -3"));
  CHECK_THAT(init({.world_size = 2, .rank = -2}),
             Contains("rank must not be negative (-1: from the environment), but got -2"));
  CHECK_THAT(init({.world_size = 2, .rank = 1}), Contains("env:// needs MASTER_ADDR"));
  env.set("MASTER_ADDR", "127.0.0.1");
  CHECK_THAT(init({.world_size = 2, .rank = 1}), Contains("env:// needs MASTER_PORT"));
  env.set("RANK", "x");
  CHECK_THAT(init({.world_size = 2}),
             Contains("environment variable RANK must be an integer, but got 'x'"));
  env.set("RANK", "1x");
  CHECK_THAT(init({.world_size = 2}),
             Contains("environment variable RANK must be an integer, but got '1x'"));
  env.set("RANK", " 1");
  CHECK_THAT(init({.world_size = 2}), Contains("must be an integer, but got ' 1'"));
  env.set("RANK", "-1");
  CHECK_THAT(init({.world_size = 2}),
             Contains("environment variable RANK must not be negative, but got '-1'"));
  env.set("RANK", "99999999999");
  CHECK_THAT(init({.world_size = 2}), Contains("environment variable RANK is out of range"));
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "3");
  CHECK_THAT(init({}), Contains("rank 5 (from RANK) is outside [0, 3)"));
  CHECK_THAT(
      init({.backend = "mpi", .world_size = 1, .rank = 0, .store = std::make_shared<hash_store>()}),
      Contains("the mpi backend is not available: actorch has no MPI backend"));
  CHECK_THAT(
      init({.backend = "xyz", .world_size = 1, .rank = 0, .store = std::make_shared<hash_store>()}),
      Contains("xyz"));
  SECTION("a master that never answers fails within the timeout") {
    const actorch::test::refused_port refused; // bound, never listening
    const int port = refused.port();
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THAT(init({.init_method = "tcp://127.0.0.1:" + std::to_string(port),
                     .world_size = 2,
                     .rank = 1,
                     .timeout = 400ms}),
               Contains("no master answered at 127.0.0.1:" + std::to_string(port)) &&
                   Contains("within 400 ms"));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
  SECTION("a rank that never joins fails the master within the timeout") {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THAT(init({.init_method = "tcp://127.0.0.1:" + std::to_string(free_port()),
                     .world_size = 2,
                     .rank = 0,
                     .timeout = 400ms}),
               Contains("could not connect to its peers after ") &&
                   Contains(" ms (the group's timeout is 400 ms)"));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
  CHECK_FALSE(is_initialized());
  tensor t = zeros({1});
  CHECK_THAT(error_of([&] { all_reduce(t); }), Contains("not initialized"));
}

TEST_CASE("a rank process killed mid-collective fails the others within the timeout",
          "[comm][init][errors]") {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 3; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        init_process_group({.init_method = url, .world_size = 3, .rank = rank, .timeout = 2000ms});
        tensor t = ones({1 << 16});
        all_reduce(t);
        if (rank == 2)
          ::kill(::getpid(), SIGKILL);
        const auto t0 = std::chrono::steady_clock::now();
        const std::string e = error_of([&] {
          for (int i = 0; i < 100; ++i)
            all_reduce(t);
        });
        const bool named =
            e.find("all_reduce failed on rank " + std::to_string(rank)) != std::string::npos &&
            e.find("peers [") != std::string::npos;
        // Killed within a heartbeat of its last collective: the error says it has exited (the
        // shared-memory barrier finds its pid gone, the roll call its process), not that it is
        // alive and has finished nothing, as its last entry alone would.
        const bool exited = e.find("rank 2 (pid ") != std::string::npos &&
                            e.find("has exited") != std::string::npos &&
                            e.find("has finished no collective yet") == std::string::npos;
        const bool in_time = std::chrono::steady_clock::now() - t0 < 4s;
        if (!named || !exited || !in_time) {
          std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
          code = 1;
        }
        // The group now refuses work with the same reason.
        const std::string again = error_of([&] { barrier(); });
        if (again.find("refused") == std::string::npos)
          code = 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 3;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  CHECK(codes == std::vector<int>{0, 0, -SIGKILL});
}

TEST_CASE("backend names are taken as PyTorch spells them, and new_group takes one",
          "[comm][init]") {
  CHECK(Backend::canonical("GLOO") == "gloo");
  CHECK(Backend::canonical("Nccl") == Backend::NCCL);
  CHECK_THAT(error_of([] { (void)Backend::canonical("glooo"); }),
             Contains("unknown backend 'glooo' (expected gloo or nccl, in any case"));
  init_process_group(
      {.backend = "GLOO", .world_size = 1, .rank = 0, .store = std::make_shared<hash_store>()});
  CHECK(get_backend() == Backend::GLOO);
  const group same = new_group({0}, 5s, std::string("Gloo"));
  CHECK(get_backend(same) == "gloo");
  tensor t = full({2}, 3.0);
  all_reduce(t, reduce_op::sum, same);
  CHECK(actorch::test::values_of(t) == std::vector<double>{3, 3});
  CHECK_THAT(error_of([] { (void)new_group({0}, {}, std::string("MPI")); }),
             Contains("the mpi backend is not available"));
  CHECK_THAT(error_of([] { (void)new_group({0}, {}, std::string("tcp")); }),
             Contains("unknown backend 'tcp'"));
  if (!is_nccl_available())
    CHECK_THAT(error_of([] { (void)new_group({0}, {}, std::string(Backend::NCCL)); }),
               Contains("the nccl backend is not available"));
  destroy_process_group();
}

namespace {

// Every collective at this world size, checked, then a short DDP training whose replicas must
// agree; rank 0 prints the wall time per collective (a line for the notes: how cost grows).
void every_collective(int rank, int world, const char* path) {
  using ms = std::chrono::duration<double, std::milli>;
  const auto time_it = [](const std::function<void()>& f, int reps) {
    f(); // warm
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      f();
    return ms(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const int64_t n = 1 << 18; // 1 MiB of float32
  tensor t = full({n}, double(rank));
  const double ar = time_it([&] { t.fill_(double(rank)), all_reduce(t); }, 5);
  ACTORCH_CHECK(t[0].item<double>() == world * (world - 1) / 2.0, "all_reduce sum ", t[0]);
  tensor b = full({n}, double(rank));
  const double bc = time_it([&] { b.fill_(double(rank)), broadcast(b, world - 1); }, 5);
  ACTORCH_CHECK(b[n - 1].item<double>() == world - 1, "broadcast ", b[n - 1]);
  tensor r = full({4}, 1.0);
  reduce(r, 0);
  ACTORCH_CHECK(rank != 0 || r[0].item<double>() == world, "reduce ", r[0]);
  std::vector<tensor> gathered;
  for (int i = 0; i < world; ++i)
    gathered.push_back(zeros({2}));
  const double ag = time_it([&] { all_gather(gathered, full({2}, double(rank))); }, 5);
  for (int i = 0; i < world; ++i)
    ACTORCH_CHECK(gathered[size_t(i)][1].item<double>() == i, "all_gather from ", i);
  std::vector<tensor> to_each, from_each;
  for (int i = 0; i < world; ++i) {
    to_each.push_back(full({1}, double(rank * 100 + i)));
    from_each.push_back(zeros({1}));
  }
  all_to_all(from_each, to_each);
  for (int i = 0; i < world; ++i)
    ACTORCH_CHECK(from_each[size_t(i)].item<double>() == i * 100 + rank, "all_to_all from ", i);
  tensor part = zeros({1});
  reduce_scatter(part, to_each);
  ACTORCH_CHECK(part.item<double>() == 100.0 * world * (world - 1) / 2 + double(world) * rank,
                "reduce_scatter ", part);
  std::vector<tensor> scattered;
  if (rank == 0)
    for (int i = 0; i < world; ++i)
      scattered.push_back(full({1}, double(i)));
  tensor mine = zeros({1});
  scatter(mine, scattered, 0);
  ACTORCH_CHECK(mine.item<double>() == rank, "scatter ", mine);
  std::vector<tensor> at_root;
  if (rank == 0)
    for (int i = 0; i < world; ++i)
      at_root.push_back(zeros({1}));
  gather(full({1}, double(rank)), at_root, 0);
  ACTORCH_CHECK(rank != 0 || at_root.back().item<double>() == world - 1, "gather");
  const double br = time_it([] { barrier(); }, 5);
  // A short DDP training: every replica must end with the same parameters.
  generator g(uint64_t(rank) + 1); // different starting values: DDP broadcasts rank 0's
  auto model = std::make_shared<nn::linear>(8, 4, true, &g);
  distributed_data_parallel ddp(model, process_replicas(dist::world()));
  optim::sgd opt(model->parameters(), {.lr = 0.1});
  const double step = time_it(
      [&] {
        opt.zero_grad();
        nn::functional::mse_loss(ddp(randn({4, 8}, {}, &g)), zeros({4, 4})).backward();
        opt.step();
      },
      3);
  tensor hi = model->weight.detach().clone(), lo = model->weight.detach().clone();
  all_reduce(hi, reduce_op::max);
  all_reduce(lo, reduce_op::min);
  ACTORCH_CHECK(hi.sub(lo).abs().max().item<double>() == 0, "DDP replicas disagree");
  if (rank == 0)
    std::printf("scale world=%d path=%s all_reduce_1MiB_ms=%.3f broadcast_1MiB_ms=%.3f "
                "all_gather_8B_ms=%.3f barrier_ms=%.3f ddp_step_ms=%.3f\n",
                world, path, ar, bc, ag, br, step);
  std::fflush(stdout);
}

} // namespace

TEST_CASE("worlds of 8, 16 and 32 processes run every collective over loopback, TCP and "
          "shared memory",
          "[comm][init][scale]") {
  for (const int world : {8, 16, 32}) {
    for (const char* shm : {"1", "0"}) {
      INFO("world " << world << ", ACTORCH_GLOO_SHM=" << shm);
      const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port());
      ::setenv("ACTORCH_GLOO_SHM", shm, 1);
      CHECK_NOTHROW(spawn(
          [&](int rank) {
            init_process_group({.init_method = url + "?rank=" + std::to_string(rank) +
                                               "&world_size=" + std::to_string(world),
                                .timeout = 60000ms});
            every_collective(rank, world, std::string(shm) == "1" ? "shm" : "tcp");
            destroy_process_group();
          },
          world));
      ::unsetenv("ACTORCH_GLOO_SHM");
    }
  }
}
