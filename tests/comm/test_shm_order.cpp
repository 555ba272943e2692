// The shared-memory all-reduce reduces every element in rank order on each of its paths (the
// small buffers, the slots, shared blocks): a rank's part holds the same bits whichever rank
// owns it, and the same op gives the same bits whichever path its size or memory takes.
#include <catch2/catch.hpp>

#include <chrono>

#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;

TEST_CASE("the shared-memory all-reduce sums every element in rank order, on every path",
          "[comm][gloo][shm]") {
  // Ranks 0, 1, 2 hold 1e8, -1e8 and 1: in rank order the float32 sum is (1e8 - 1e8) + 1 = 1,
  // while (1 + 1e8) - 1e8, rank 2's own value first, is 0 (1e8 + 1 rounds to 1e8). Sizes: the
  // small buffers' path, one round through the slots, several rounds; then a shared block.
  // No shared block is made at the small path's size, so that pair is not generated.
  const auto [n, shared] = GENERATE(table<int64_t, bool>(
      {{1000, false}, {300001, false}, {3000000, false}, {300001, true}, {3000000, true}}));
  INFO(n << " floats" << (shared ? " in a shared block" : ""));
  const float mine[] = {1e8f, -1e8f, 1.0f};
  const auto wrong = on_ranks<int64_t>(
      3,
      [&](int r, process_group_gloo& pg) -> int64_t {
        tensor t = shared ? pg.empty_shared(n, dtype::float32) : empty({n});
        if (!t.defined())
          return -1;
        t.fill_(double(mine[r]));
        pg.all_reduce(t, reduce_op::sum).wait();
        const float* p = t.data_ptr<float>();
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i)
          bad += p[i] != 1.0f;
        return bad;
      },
      short_timeout(20000));
  CHECK(wrong == std::vector<int64_t>(3, 0));
}
