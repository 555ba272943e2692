// Every collective but the all-reduce through shared memory (Note [Staged collectives]) at the
// sizes that take each of its paths: a few elements (one barrier on the small buffers), more
// than a small buffer holds (one round through the slots, or one copy straight from the peers'
// tensors: Note [Single-copy collectives]) and more than a slot holds (several rounds), at
// worlds 2 and 3, staged, single-copy between threads and between processes, and the same over
// Gloo's TCP for comparison; each result against values computed here. Then ranks on different
// paths of mismatched ops.
#include <catch2/catch.hpp>

#include <chrono>

#include <signal.h>
#include <sys/uio.h>

#include "core/ops/factory.hpp"
#include "tests/comm/processes.hpp"
#include "tests/comm/ranks.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

// Rank r's element i: small integers, so that float32 sums are exact.
float value(int r, int64_t i) {
  return float((r + 1) * 1000 + i % 997);
}

tensor rank_tensor(int r, int64_t n, int tag = 0) {
  tensor t = empty({n});
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    p[i] = value(r, i) + float(tag);
  return t;
}

// How many elements of `t` differ from want(i).
template <class F> int64_t wrong(const tensor& t, F want) {
  const tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < c.numel(); ++i)
    bad += p[i] != want(i);
  return bad;
}

struct sized {
  int world;
  int64_t n;
  bool processes = false;
  process_group_gloo::options opts = short_timeout(20000);
};

// The sizes and paths each test runs: elements per rank's tensor; Gloo's TCP, staged through
// shared memory, single-copy between ranks on threads (memmove) and on processes
// (process_vm_readv).
sized setting() {
  sized s{GENERATE(2, 3), GENERATE(int64_t(5), int64_t(100000), int64_t(1300000))};
  const int path = GENERATE(0, 1, 2, 3);
  s.opts.shared_memory = path != 0;
  s.opts.single_copy = path >= 2;
  s.processes = path == 3;
  return s;
}

// Runs fn on every rank and requires that no rank counted a wrong element.
void expect_right(const sized& s, const std::function<int64_t(int, process_group_gloo&)>& fn) {
  INFO("world " << s.world << ", " << s.n << " floats, shared memory " << s.opts.shared_memory
                << ", single copy " << s.opts.single_copy << ", processes " << s.processes);
  const auto bad = s.processes ? on_processes<int64_t>(s.world, fn, s.opts)
                               : on_ranks<int64_t>(s.world, fn, s.opts);
  CHECK(bad == std::vector<int64_t>(size_t(s.world), 0));
}

// Whether one process may read a sibling's memory here, as ranks started side by side do
// (ptrace policy decides): a child reads a word of another child's.
bool siblings_may_read() {
  static uint64_t word = 0x5eed5eed;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::close(ready[0]);
    write_all(ready[1], "x", 1);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  const pid_t reader = ::fork();
  if (reader == 0) {
    uint64_t got = 0;
    iovec local{&got, sizeof got}, remote{&word, sizeof word};
    const bool read = ::process_vm_readv(holder, &local, 1, &remote, 1, 0) == sizeof got;
    ::_exit(read && got == word ? 0 : 1);
  }
  int status = 0;
  ::waitpid(reader, &status, 0);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

} // namespace

TEST_CASE("processes copy once where they may read each other's memory, staged where they may "
          "not or are told not to",
          "[comm][gloo][shm]") {
  const bool may = siblings_may_read();
  const bool single = GENERATE(true, false);
  INFO("siblings may read each other's memory here: " << may << "; single_copy " << single);
  auto opts = short_timeout(20000);
  opts.single_copy = single;
  const auto got = on_processes<int>(
      2,
      [](int, process_group_gloo& pg) {
        const std::string how = pg.transport();
        return how == "shared memory, single copy" ? 2 : how == "shared memory" ? 1 : 0;
      },
      opts);
  CHECK(got == std::vector<int>(2, single && may ? 2 : 1));
}

TEST_CASE("all_gather through shared memory at every size, into contiguous and strided outputs",
          "[comm][gloo][shm]") {
  const sized s = setting();
  expect_right(s, [&](int r, process_group_gloo& pg) {
    const tensor in = rank_tensor(r, s.n);
    tensor flat = empty({s.world * s.n});
    pg.all_gather_into_tensor(flat, in).wait();
    tensor grid = empty({s.n, s.world}); // column q holds rank q's tensor: strided outputs
    std::vector<tensor> cols;
    for (int q = 0; q < s.world; ++q)
      cols.push_back(grid.select(1, q));
    pg.all_gather(cols, in).wait();
    int64_t bad = wrong(flat, [&](int64_t i) { return value(int(i / s.n), i % s.n); });
    for (int q = 0; q < s.world; ++q)
      bad += wrong(grid.select(1, q), [&](int64_t i) { return value(q, i); });
    return bad;
  });
}

TEST_CASE("gather and scatter through shared memory at every size", "[comm][gloo][shm]") {
  const sized s = setting();
  const int root = 1;
  expect_right(s, [&](int r, process_group_gloo& pg) {
    std::vector<tensor> outs, ins;
    if (r == root)
      for (int q = 0; q < s.world; ++q) {
        outs.push_back(empty({s.n}));
        ins.push_back(rank_tensor(q, s.n, 7));
      }
    pg.gather(outs, rank_tensor(r, s.n), root).wait();
    tensor mine = zeros({s.n});
    pg.scatter(mine, ins, root).wait();
    int64_t bad = wrong(mine, [&](int64_t i) { return value(r, i) + 7; });
    for (int q = 0; q < int(outs.size()); ++q)
      bad += wrong(outs[size_t(q)], [&](int64_t i) { return value(q, i); });
    return bad;
  });
}

TEST_CASE("broadcast through shared memory at every size", "[comm][gloo][shm]") {
  const sized s = setting();
  const int root = s.world - 1;
  expect_right(s, [&](int r, process_group_gloo& pg) {
    tensor t = rank_tensor(r, s.n);
    pg.broadcast(t, root).wait();
    return wrong(t, [&](int64_t i) { return value(root, i); });
  });
}

TEST_CASE("reduce through shared memory at every size: SUM, MAX and AVG on the root, the other "
          "ranks' tensors untouched",
          "[comm][gloo][shm]") {
  const sized s = setting();
  const int root = 1;
  expect_right(s, [&](int r, process_group_gloo& pg) {
    int64_t bad = 0;
    for (const reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::avg}) {
      tensor t = rank_tensor(r, s.n);
      pg.reduce(t, root, op).wait();
      bad += wrong(t, [&](int64_t i) {
        if (r != root)
          return value(r, i);
        float sum = 0;
        for (int q = 0; q < s.world; ++q)
          sum += value(q, i);
        return op == reduce_op::max   ? value(s.world - 1, i)
               : op == reduce_op::avg ? sum / float(s.world)
                                      : sum;
      });
    }
    return bad;
  });
}

TEST_CASE("reduce_scatter through shared memory at every size, SUM and AVG", "[comm][gloo][shm]") {
  const sized s = setting();
  expect_right(s, [&](int r, process_group_gloo& pg) {
    int64_t bad = 0;
    for (const reduce_op op : {reduce_op::sum, reduce_op::avg}) {
      std::vector<tensor> ins; // rank r's input for rank j: value(r, i) + j
      for (int j = 0; j < s.world; ++j)
        ins.push_back(rank_tensor(r, s.n, j));
      tensor out = empty({s.n});
      pg.reduce_scatter(out, ins, op).wait();
      bad += wrong(out, [&](int64_t i) {
        float sum = 0;
        for (int q = 0; q < s.world; ++q)
          sum += value(q, i) + float(r);
        return op == reduce_op::avg ? sum / float(s.world) : sum;
      });
    }
    return bad;
  });
}

TEST_CASE("all_to_all through shared memory at every size, a different size for each pair",
          "[comm][gloo][shm]") {
  const sized s = setting();
  // Rank r sends (j + r + 1) * n / 2 elements of value(r, i) + j to rank j.
  const auto count = [&](int from, int to) { return (to + from + 1) * s.n / 2; };
  expect_right(s, [&](int r, process_group_gloo& pg) {
    std::vector<tensor> ins, outs;
    for (int j = 0; j < s.world; ++j) {
      ins.push_back(rank_tensor(r, count(r, j), j));
      outs.push_back(empty({count(j, r)}));
    }
    pg.all_to_all(outs, ins).wait();
    int64_t bad = 0;
    for (int i = 0; i < s.world; ++i)
      bad += wrong(outs[size_t(i)], [&](int64_t k) { return value(i, k) + float(r); });
    return bad;
  });
}

TEST_CASE("outputs past the caches, written with streaming stores, are right at any alignment",
          "[comm][gloo][shm]") {
  // Note [Streaming copies]
  // ~~~~~~~~~~~~~~~~~~~~~~~
  // 16 MiB of output per op and more. Outputs start 1 element into
  // their buffers, off the stores' 16-byte alignment, and end off a 64-byte block.
  const int64_t n = (int64_t(17) << 20) / 4 + 3; // floats per rank: over 16 MiB
  const auto bad = on_ranks<int64_t>(
      2,
      [&](int r, process_group_gloo& pg) {
        const tensor in = rank_tensor(r, n);
        tensor flat = empty({2 * n + 1});
        tensor out = flat.narrow(0, 1, 2 * n);
        pg.all_gather_into_tensor(out, in).wait();
        int64_t wrong_count = wrong(out, [&](int64_t i) { return value(int(i / n), i % n); });
        tensor b = empty({n + 1});
        tensor bt = b.narrow(0, 1, n);
        bt.copy_(rank_tensor(r, n));
        pg.broadcast(bt, 0).wait();
        wrong_count += wrong(bt, [&](int64_t i) { return value(0, i); });
        std::vector<tensor> ins{rank_tensor(r, n, 0), rank_tensor(r, n, 1)}, outs;
        tensor space = empty({2 * n + 1});
        outs.push_back(space.narrow(0, 1, n));
        outs.push_back(space.narrow(0, n + 1, n));
        pg.all_to_all(outs, ins).wait();
        for (int i = 0; i < 2; ++i)
          wrong_count += wrong(outs[size_t(i)], [&](int64_t k) { return value(i, k) + float(r); });
        return wrong_count;
      },
      short_timeout(20000));
  CHECK(bad == std::vector<int64_t>{0, 0});
}

TEST_CASE("ranks on different shared-memory paths of mismatched collectives all get the mismatch, "
          "at once",
          "[comm][gloo][shm]") {
  // A few elements take one barrier on the small buffers, a million several rounds through the
  // slots, a middle-sized broadcast reads the root's tensor: each rank must still see the other's
  // header and fail, not wait for a barrier the other never reaches (Note [Header mismatches]).
  using run_fn = std::function<void(process_group_gloo&, int64_t)>;
  const std::vector<std::pair<std::string, run_fn>> ops = {
      {"all_reduce",
       [](process_group_gloo& pg, int64_t n) {
         tensor t = zeros({n});
         pg.all_reduce(t, reduce_op::sum).wait();
       }},
      {"all_gather_into_tensor",
       [](process_group_gloo& pg, int64_t n) {
         tensor out = empty({2 * n});
         pg.all_gather_into_tensor(out, zeros({n})).wait();
       }},
      {"broadcast",
       [](process_group_gloo& pg, int64_t n) {
         tensor t = zeros({n});
         pg.broadcast(t, 0).wait();
       }},
      {"broadcast of 100000 or 200000 floats", // single copy, sizes that differ as n's do
       [](process_group_gloo& pg, int64_t n) {
         tensor t = zeros({n < 100000 ? 100000 : 200000});
         pg.broadcast(t, 0).wait();
       }},
      {"reduce", // pipelined rounds
       [](process_group_gloo& pg, int64_t n) {
         tensor t = zeros({n});
         pg.reduce(t, 1, reduce_op::sum).wait();
       }},
      {"reduce_scatter",
       [](process_group_gloo& pg, int64_t n) {
         tensor out = empty({n});
         pg.reduce_scatter(out, {zeros({n}), zeros({n})}, reduce_op::sum).wait();
       }},
  };
  const size_t a = GENERATE(0, 1, 2, 3, 4, 5), b = GENERATE(0, 1, 2, 3, 4, 5);
  INFO("rank 0: " << ops[a].first << " of 5 floats; rank 1: " << ops[b].first
                  << " of 1.3 M floats");
  const auto start = std::chrono::steady_clock::now();
  struct seen {
    std::string error;
    double after = 0; // an all_reduce of ones after the mismatch: the group is still usable
  };
  const auto got = on_ranks<seen>(2, [&](int r, process_group_gloo& pg) {
    seen s;
    s.error = error_of([&] { r == 0 ? ops[a].second(pg, 5) : ops[b].second(pg, 1300000); });
    tensor one = ones({3});
    pg.all_reduce(one, reduce_op::sum).wait();
    s.after = one.sum().item<double>();
    return s;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const seen& s : got) {
    CHECK_THAT(s.error, Contains("issued different collectives or tensors"));
    CHECK(s.after == 6.0);
  }
  CHECK(seconds < 2.0); // the group's timeout is 3 s: nobody waited for it
}
