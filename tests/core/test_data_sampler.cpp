// Tests of core/data samplers: what each yields per epoch, with PyTorch's semantics (lengths,
// replacement, drop_last, DistributedSampler's padding and sharding), and reproducibility from
// a generator's state.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/data/batch_sampler.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/data/sampler.hpp"

using namespace actorch;
using namespace actorch::data;
using Catch::Contains;

namespace {
std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}
std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}
} // namespace

TEST_CASE("SequentialSampler yields 0..n-1", "[data][sampler]") {
  sequential_sampler s(5);
  CHECK(s.size() == 5);
  CHECK(s.indices() == iota_vec(5));
  CHECK(sequential_sampler(0).indices().empty());
}

TEST_CASE("RandomSampler permutes, reshuffles per epoch and replays from a generator state",
          "[data][sampler]") {
  auto gen = std::make_shared<generator>(7);
  random_sampler s(100, false, -1, gen);
  const auto state = gen->get_state();
  auto e0 = s.indices();
  auto e1 = s.indices();
  CHECK(sorted(e0) == iota_vec(100));
  CHECK(sorted(e1) == iota_vec(100));
  CHECK(e0 != iota_vec(100));
  CHECK(e0 != e1); // a new order every epoch
  gen->set_state(state);
  CHECK(s.indices() == e0);

  SECTION("num_samples beyond n without replacement takes whole permutations then a prefix") {
    random_sampler r(4, false, 10, std::make_shared<generator>(1));
    auto idx = r.indices();
    REQUIRE(idx.size() == 10);
    CHECK(sorted({idx.begin(), idx.begin() + 4}) == iota_vec(4));
    CHECK(sorted({idx.begin() + 4, idx.begin() + 8}) == iota_vec(4));
    CHECK(std::set<int64_t>(idx.begin() + 8, idx.end()).size() == 2);
  }
  SECTION("with replacement draws num_samples indices in range, repeats allowed") {
    random_sampler r(3, true, 300, std::make_shared<generator>(3));
    CHECK(r.size() == 300);
    auto idx = r.indices();
    REQUIRE(idx.size() == 300);
    std::map<int64_t, int> count;
    for (auto i : idx) {
      REQUIRE(i >= 0);
      REQUIRE(i < 3);
      ++count[i];
    }
    CHECK(count.size() == 3);
    for (auto& [k, c] : count)
      CHECK(c > 60); // ~100 each
  }
  SECTION("num_samples = 0 is rejected") {
    CHECK_THROWS_WITH(random_sampler(3, true, 0), Contains("num_samples should be a positive"));
  }
}

TEST_CASE("SubsetRandomSampler permutes the given indices", "[data][sampler]") {
  subset_random_sampler s({10, 20, 30, 40}, std::make_shared<generator>(5));
  CHECK(s.size() == 4);
  CHECK(sorted(s.indices()) == std::vector<int64_t>{10, 20, 30, 40});
}

TEST_CASE("WeightedRandomSampler draws in proportion to the weights", "[data][sampler]") {
  SECTION("with replacement") {
    weighted_random_sampler s({0.0, 1.0, 3.0}, 4000, true, std::make_shared<generator>(11));
    std::map<int64_t, int> count;
    for (auto i : s.indices())
      ++count[i];
    CHECK(count[0] == 0); // weight 0 is never drawn
    CHECK(count[1] > 800);
    CHECK(count[1] < 1200); // expected 1000
    CHECK(count[2] > 2800);
    CHECK(count[2] < 3200); // expected 3000
  }
  SECTION("without replacement: distinct indices, heavier ones first more often") {
    int heavy_first = 0;
    auto gen = std::make_shared<generator>(13);
    weighted_random_sampler s({1.0, 1.0, 1.0, 20.0, 0.0}, 4, false, gen);
    for (int rep = 0; rep < 200; ++rep) {
      auto idx = s.indices();
      REQUIRE(sorted(idx) == std::vector<int64_t>{0, 1, 2, 3});
      heavy_first += idx[0] == 3;
    }
    CHECK(heavy_first > 150); // P = 20/23
    CHECK_THROWS_WITH(weighted_random_sampler({1.0, 0.0, 1.0}, 3, false),
                      Contains("cannot draw 3 samples without replacement from 2"));
  }
  CHECK_THROWS_WITH(weighted_random_sampler({1.0, -1.0}, 2), Contains("weight 1 is -1"));
}

TEST_CASE("BatchSampler groups indices and honours drop_last", "[data][sampler]") {
  auto base = std::make_shared<sequential_sampler>(10);
  batch_sampler keep(base, 3, false), drop(base, 3, true);
  CHECK(keep.size() == 4);
  CHECK(drop.size() == 3);
  auto b = keep.batches();
  REQUIRE(b.size() == 4);
  CHECK(b[0] == std::vector<int64_t>{0, 1, 2});
  CHECK(b[3] == std::vector<int64_t>{9});
  CHECK(drop.batches().size() == 3);
  CHECK_THROWS_WITH(batch_sampler(base, 0, false), Contains("batch_size should be a positive"));
}

TEST_CASE("DistributedSampler pads so every rank gets the same count, or drops the tail",
          "[data][sampler]") {
  SECTION("padding without shuffle: 10 indices over 3 ranks") {
    std::vector<std::vector<int64_t>> per_rank;
    for (int64_t r = 0; r < 3; ++r) {
      distributed_sampler s(10, 3, r, false);
      CHECK(s.size() == 4);
      CHECK(s.total_size() == 12);
      per_rank.push_back(s.indices());
    }
    // PyTorch: indices + indices[:2] = [0..9, 0, 1], then rank::3.
    CHECK(per_rank[0] == std::vector<int64_t>{0, 3, 6, 9});
    CHECK(per_rank[1] == std::vector<int64_t>{1, 4, 7, 0});
    CHECK(per_rank[2] == std::vector<int64_t>{2, 5, 8, 1});
  }
  SECTION("padding wraps around more than once when replicas outnumber samples") {
    distributed_sampler s(2, 5, 4, false);
    CHECK(s.indices() == std::vector<int64_t>{0}); // [0,1,0,1,0][4]
  }
  SECTION("drop_last drops the tail") {
    distributed_sampler s(10, 3, 2, false, 0, true);
    CHECK(s.size() == 3);
    CHECK(s.indices() == std::vector<int64_t>{2, 5, 8});
  }
  SECTION("shuffle: ranks partition one permutation that changes with set_epoch") {
    std::vector<int64_t> all, epoch0_rank0;
    for (int64_t r = 0; r < 4; ++r) {
      distributed_sampler s(20, 4, r, true, 123);
      auto idx = s.indices();
      if (r == 0)
        epoch0_rank0 = idx;
      all.insert(all.end(), idx.begin(), idx.end());
    }
    CHECK(sorted(all) == iota_vec(20));
    distributed_sampler s(20, 4, 0, true, 123);
    CHECK(s.indices() == epoch0_rank0); // same seed and epoch, same order
    s.set_epoch(1);
    CHECK(s.indices() != epoch0_rank0);
  }
  CHECK_THROWS_WITH(distributed_sampler(10, 2, 2), Contains("Invalid rank 2"));
}

TEST_CASE("DistributedSampler takes num_replicas and rank from the default group when not given",
          "[core][data][sampler]") {
  set_default_group_query({});
  CHECK_THROWS_WITH(distributed_sampler(10),
                    Contains("DistributedSampler: num_replicas was not given and the default "
                             "process group is not initialized"));
  // What comm's init_process_group installs, answered here by hand: world 3, rank 2.
  set_default_group_query([] {
    return std::optional<std::pair<int64_t, int64_t>>(std::pair<int64_t, int64_t>{3, 2});
  });
  distributed_sampler s(10, std::nullopt, std::nullopt, false);
  CHECK(s.size() == 4);
  CHECK(s.indices() == std::vector<int64_t>{2, 5, 8, 1}); // padded by wrapping around
  CHECK(distributed_sampler(10, std::nullopt, 0, false).indices() ==
        std::vector<int64_t>{0, 3, 6, 9});                                   // a given rank wins
  CHECK_THROWS_WITH(distributed_sampler(10, 2), Contains("Invalid rank 2")); // rank 2 of 2
  set_default_group_query({});
}

TEST_CASE("remaining_shard takes up an epoch where k steps of every rank left it",
          "[data][sampler][elastic]") {
  // Note [Elastic data position]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Offset 0 is DistributedSampler's own division.
  for (const bool drop_last : {false, true})
    for (const int64_t world : {1, 2, 3, 5}) {
      for (int64_t rank = 0; rank < world; ++rank) {
        distributed_sampler s(103, world, rank, true, 7, drop_last);
        s.set_epoch(4);
        CHECK(remaining_shard(s.epoch_order(4), 0, world, rank, drop_last) == s.indices());
      }
    }
  // Three ranks take 4 steps of 8, then two survivors divide the rest: each index once, and
  // only padding repeats (one, for the rest's odd count).
  const int64_t n = 203, batch = 8;
  const distributed_sampler whole(n, 1, 0, true, 1, false);
  const std::vector<int64_t> order = whole.epoch_order(2);
  std::map<int64_t, int> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    const auto shard = remaining_shard(order, 0, 3, rank, false);
    for (int64_t i = 0; i < 4 * batch; ++i)
      ++seen[shard[size_t(i)]];
  }
  const int64_t offset = 4 * batch * 3;
  for (int64_t rank = 0; rank < 2; ++rank)
    for (const int64_t i : remaining_shard(order, offset, 2, rank, false))
      ++seen[i];
  CHECK(seen.size() == size_t(n));
  int repeats = 0;
  for (const auto& [index, count] : seen)
    repeats += count - 1;
  CHECK(repeats == 1);
  // Past the end: nothing left.
  CHECK(remaining_shard(order, n + 5, 2, 1, false).empty());
  CHECK_THROWS_WITH(remaining_shard(order, 0, 2, 2, false), Catch::Contains("rank 2 of 2"));
}
