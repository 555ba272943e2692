// Tests of the loader over iterable datasets (each worker its own iterator, batches
// interleaved round-robin, each batch's randomness independent of timing, mid-epoch resume,
// drop_last per worker, errors naming the worker, back-pressure on an endless stream) and of
// unbatched loading (batch_size = nullopt: default_convert per sample),
// for map-style and iterable datasets, with and without workers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/data/batch_sampler.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;
using Catch::Contains;

namespace {

int64_t int_of(const sample& s) {
  return s.as_tensor().data_ptr<int64_t>()[0];
}

} // namespace

TEST_CASE("an iterable dataset gives each worker its own iterator, batches round-robin",
          "[actors][loader][iterable]") {
  for (int64_t workers : {0, 1, 2, 3}) {
    for (bool split : {false, true}) {
      for (bool drop_last : {false, true}) {
        for (int64_t n : {10, 11, 20}) {
          auto ds = std::make_shared<range_iterable>(n, split);
          data_loader loader(ds, {.batch_size = 3, .num_workers = workers, .drop_last = drop_last});
          const auto want = round_robin(n, workers, split, 3, drop_last);
          INFO("workers " << workers << " split " << split << " drop_last " << drop_last << " n "
                          << n);
          CHECK(epoch_labels(loader) == want);
          CHECK(epoch_labels(loader) == want); // a new epoch iterates afresh
          CHECK(loader.epoch() == 2);
        }
      }
    }
  }
  SECTION("without splitting every worker yields the whole stream, as in PyTorch") {
    auto ds = std::make_shared<range_iterable>(4, false);
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2});
    CHECK(epoch_labels(loader) ==
          std::vector<std::vector<int64_t>>{{0, 1}, {0, 1}, {2, 3}, {2, 3}});
  }
  SECTION("the round-robin order holds under uneven worker speeds; in_order=false as ready") {
    auto ds = std::make_shared<range_iterable>(24, true);
    ds->hook = [](int64_t) {
      if (get_worker_info()->id == 0)
        sleep_ms(3); // worker 0 is slow: timing must not matter
    };
    data_loader ordered(ds, {.batch_size = 2, .num_workers = 3, .persistent_workers = true});
    const auto want = round_robin(24, 3, true, 2, false);
    CHECK(epoch_labels(ordered) == want);
    CHECK(epoch_labels(ordered) == want); // persistent workers start a new pass too
    data_loader as_ready(ds, {.batch_size = 2, .num_workers = 3, .in_order = false});
    auto got = epoch_labels(as_ready);
    CHECK(std::multiset(got.begin(), got.end()) == std::multiset(want.begin(), want.end()));
    CHECK(got != want); // worker 0's batches come last
  }
}

TEST_CASE("an iterable batch draws the same randomness whenever a stream's end is seen",
          "[actors][loader][iterable]") {
  // Worker 0's stream ends after one sample, worker 1's after six, each 10 ms. Told of worker
  // 0's end at once or only 300 ms later (after the sampler has handed worker 1 all its tasks),
  // the loader must give every batch the same batch generator.
  auto noise_by_label = [](int end_delay_ms, bool in_order) {
    auto ds = std::make_shared<range_iterable>(40, true);
    ds->noise = true;
    ds->lengths = {1, 6};
    ds->hook = [](int64_t i) {
      if (i % 2 == 1)
        sleep_ms(10);
    };
    ds->at_end = [end_delay_ms] {
      if (get_worker_info()->id == 0)
        sleep_ms(end_delay_ms);
    };
    data_loader loader(ds, {.batch_size = 1,
                            .num_workers = 2,
                            .generator = std::make_shared<generator>(5),
                            .in_order = in_order});
    std::map<int64_t, double> out;
    for (const auto& b : loader) {
      const int64_t label = int_of(b[1]);
      out[label] = b[0].as_tensor().data_ptr<float>()[0] - double(label);
    }
    return out;
  };
  for (bool in_order : {true, false}) {
    INFO("in_order " << in_order);
    const auto prompt = noise_by_label(0, in_order);
    const auto late = noise_by_label(300, in_order);
    CHECK(prompt.size() == 7);
    CHECK(prompt == late);
    std::set<double> distinct;
    for (const auto& [label, noise] : prompt)
      distinct.insert(noise);
    CHECK(distinct.size() == prompt.size()); // each batch its own draw
  }
}

TEST_CASE("an iterable dataset rejects sampler options and has no length",
          "[actors][loader][iterable]") {
  auto ds = std::make_shared<range_iterable>(10, false);
  auto s = std::make_shared<sequential_sampler>(10);
  CHECK_THROWS_WITH(data_loader(ds, {.shuffle = true}),
                    Contains("DataLoader with IterableDataset: expected unspecified shuffle "
                             "option"));
  CHECK_THROWS_WITH(data_loader(ds, {.sampler = s}),
                    Contains("DataLoader with IterableDataset: expected unspecified sampler "
                             "option"));
  CHECK_THROWS_WITH(
      data_loader(ds, {.batch_sampler = std::make_shared<batch_sampler>(s, 2, false)}),
      Contains("DataLoader with IterableDataset: expected unspecified batch_sampler option"));
  data_loader loader(ds, {.batch_size = 4, .num_workers = 1});
  CHECK_THROWS_WITH(loader.size(), Contains("an IterableDataset has no length"));
}

TEST_CASE("an iterable loader resumes mid-epoch with exactly the batches it would have seen",
          "[actors][loader][iterable]") {
  for (int64_t workers : {0, 1, 3}) {
    for (bool in_order : {true, false}) {
      for (bool drop_last : {false, true}) {
        auto ds = std::make_shared<range_iterable>(29, true);
        ds->noise = true;
        if (workers > 1)
          ds->lengths = {4}; // worker 0's stream ends early, the others go on
        auto make = [&](bool ordered) {
          return data_loader(ds, {.batch_size = 3,
                                  .num_workers = workers,
                                  .drop_last = drop_last,
                                  .generator = std::make_shared<generator>(7),
                                  .in_order = ordered});
        };
        const auto [reference_e1, reference_e2] = [&] {
          auto ref = make(true);
          return epochs_after_the_first(ref);
        }();
        REQUIRE(reference_e1.size() >= 6);
        for (size_t cut : {size_t(1), size_t(4), reference_e1.size() - 1}) {
          INFO("workers " << workers << " in_order " << in_order << " drop_last " << drop_last
                          << " cut " << cut << " of " << reference_e1.size());
          loader_state saved;
          std::vector<sample> seen;
          {
            auto first = make(in_order);
            for (const auto& b : first)
              (void)b; // epoch 0
            for (const auto& b : first) {
              seen.push_back(b);
              if (seen.size() == cut) {
                saved = first.state();
                break;
              }
            }
          }
          CHECK(saved.epoch == 1);
          CHECK(saved.streams == std::max<int64_t>(1, workers));
          CHECK(saved.delivered.size() == cut);
          auto second = make(in_order);
          check_resume(second, saved, seen, reference_e1, reference_e2, in_order);
        }
      }
    }
  }
}

TEST_CASE("a resumed iterable worker's catching up is not a timeout",
          "[actors][loader][iterable]") {
  // 20 ms a sample, a timeout of 200 ms a batch: passing over 16 delivered batches takes
  // 320 ms, within the deadline of the task that does it (17 batches' worth); the one queued
  // behind it starts its clock when that one is back (Note [Loader timeout]).
  auto ds = std::make_shared<range_iterable>(20, false);
  ds->hook = [](int64_t) { sleep_ms(20); };
  auto make = [&] { return data_loader(ds, {.batch_size = 1, .num_workers = 1, .timeout = 0.2}); };
  loader_state saved;
  {
    auto first = make();
    saved = state_after(first, 16);
  }
  auto second = make();
  second.load_state(saved);
  const auto rest = epoch_labels(second);
  CHECK(rest == std::vector<std::vector<int64_t>>{{16}, {17}, {18}, {19}});
}

TEST_CASE("a stream that fails or ends while a resumed worker passes over it",
          "[actors][loader][iterable]") {
  // One stream of 20 samples, batches of 2; the state is saved after 4 batches (samples 0-7).
  auto ds = std::make_shared<range_iterable>(20, false);
  for (int64_t workers : {0, 1}) {
    INFO("workers " << workers);
    auto make = [&] { return data_loader(ds, {.batch_size = 2, .num_workers = workers}); };
    loader_state saved;
    {
      auto first = make();
      saved = state_after(first, 4);
    }
    {
      // A dataset exception names the batch being passed over.
      ds->hook = [](int64_t i) {
        if (i == 5)
          throw std::runtime_error("bad record 5");
      };
      auto second = make();
      second.load_state(saved);
      const auto [batches, msg] = run_until_error(second);
      CHECK(batches == 0);
      CHECK_THAT(msg, Contains(workers ? "DataLoader worker 0" : "DataLoader (num_workers=0)") &&
                          Contains("resuming: passing over batch 2 of its stream") &&
                          Contains("bad record 5"));
      ds->hook = nullptr;
    }
    {
      // A stream now shorter than what was delivered (6 samples) ends the epoch.
      auto shorter = std::make_shared<range_iterable>(6, false);
      data_loader second(shorter, {.batch_size = 2, .num_workers = workers});
      second.load_state(saved);
      CHECK(epoch_labels(second).empty());
      CHECK(epoch_labels(second) == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4, 5}});
    }
  }
}

TEST_CASE("an iterable loader refuses a state it cannot resume, naming why",
          "[actors][loader][iterable]") {
  auto ds = std::make_shared<range_iterable>(30, true);
  loader_state saved;
  {
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2});
    auto it = loader.begin();
    ++it;
    ++it;
    saved = loader.state();
  }
  REQUIRE(saved.delivered.size() == 3);
  data_loader three(ds, {.batch_size = 2, .num_workers = 3});
  CHECK_THROWS_WITH(three.load_state(saved),
                    Contains("cannot resume mid-epoch from a state of 2 streams on a loader of 3 "
                             "(num_workers=3)"));
  data_loader two(ds, {.batch_size = 2, .num_workers = 2});
  loader_state gap = saved;
  gap.delivered = {0, 1, 4}; // stream 0's batches 0 and 2, without its batch 1
  CHECK_THROWS_WITH(two.load_state(gap),
                    Contains("the delivered batches of stream 0 are not its first 2"));
  loader_state twice = saved;
  twice.delivered = {0, 1, 1};
  CHECK_THROWS_WITH(two.load_state(twice),
                    Contains("the delivered batches of stream 1 are not its first 2"));
  auto map_style = std::make_shared<probe_dataset>(30);
  data_loader other(map_style, {.batch_size = 2});
  CHECK_THROWS_WITH(other.load_state(saved),
                    Contains("cannot resume mid-epoch from an IterableDataset loader's state"));
  two.load_state(saved);                        // the right state still resumes
  CHECK(epoch_labels(two).size() == 2 * 8 - 3); // two streams of 15 samples, batches of 2
}

TEST_CASE("an exception from the iterator reaches the consumer naming the worker",
          "[actors][loader][iterable]") {
  auto ds = std::make_shared<range_iterable>(20, true);
  ds->hook = [](int64_t i) {
    if (i == 7)
      throw std::runtime_error("bad record 7");
  };
  for (int64_t workers : {0, 2}) {
    data_loader loader(ds, {.batch_size = 2, .num_workers = workers});
    INFO("workers " << workers);
    // Sample 7 is worker 1's fourth (1, 3, 5, 7) and the unsplit stream's eighth: either way
    // in the batch at position 3 of the delivered order, so three batches come first.
    const auto [batches, msg] = run_until_error(loader);
    REQUIRE_FALSE(msg.empty()); // the epoch failed
    const std::string want = workers ? "DataLoader worker 1 failed while iterating the "
                                       "IterableDataset"
                                     : "DataLoader (num_workers=0) failed while iterating "
                                       "the IterableDataset";
    CHECK_THAT(msg, Contains(want) && Contains("bad record 7"));
    CHECK(batches == 3);
  }
  SECTION("a worker that dies mid-stream is an error: a stream cannot be resumed") {
    ds->hook = [](int64_t i) {
      if (i == 5)
        throw 5; // not a std::exception: it kills the worker actor
    };
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2});
    CHECK_THROWS_WITH(epoch_labels(loader),
                      Contains("DataLoader worker 1 died while iterating the IterableDataset"));
  }
}

TEST_CASE("a sample that breaks an iterable dataset's batch is an error unless drop_last drops "
          "the batch",
          "[actors][loader][iterable]") {
  // Samples 0..5, sample 5 a tensor of another shape: batches of 4 are [0, 3] and the short [4, 5].
  class ragged : public iterable_dataset {
  public:
    std::unique_ptr<sample_iterator> iter() const override {
      struct it : sample_iterator {
        int64_t i = 0;
        std::optional<sample> next() override {
          if (i == 6)
            return std::nullopt;
          const int64_t k = i++;
          return sample::make_tuple({full({k == 5 ? 3 : 2}, double(k)), k});
        }
      };
      return std::make_unique<it>();
    }
  };
  auto ds = std::make_shared<ragged>();
  for (int64_t workers : {0, 1}) {
    INFO("workers " << workers);
    // As PyTorch, which collates (and fails on) only a batch it keeps.
    data_loader dropping(ds, {.batch_size = 4, .num_workers = workers, .drop_last = true});
    CHECK(epoch_labels(dropping) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}});
    data_loader keeping(ds, {.batch_size = 4, .num_workers = workers});
    const auto [batches, msg] = run_until_error(keeping);
    CHECK(batches == 1);
    CHECK_THAT(msg, Contains("failed to collate batch 1 of the IterableDataset") &&
                        Contains("sample 0 has shape [2] and sample 1 has shape [3]"));
  }
}

TEST_CASE("an endless iterable dataset is loaded under back-pressure",
          "[actors][loader][iterable]") {
  auto ds = std::make_shared<range_iterable>(-1, true);
  const int64_t workers = 2, prefetch = 2, bs = 4, credits = workers * prefetch;
  {
    data_loader loader(ds, {.batch_size = bs, .num_workers = workers, .prefetch_factor = prefetch});
    int64_t consumed = 0, max_ahead = 0, n = 0;
    for (const auto& b : loader) {
      consumed += b[1].as_tensor().numel();
      sleep_ms(2); // a slow consumer
      max_ahead = std::max(max_ahead, ds->pulled.load() - consumed);
      if (++n == 25)
        break;
    }
    CHECK(consumed == 25 * bs);
    CHECK(max_ahead <= credits * bs); // loaded, not yet in hand: the batches holding credit
    const auto st = loader.pool_stats();
    CHECK(st.peak_live <= 2 * (credits + 1));
  } // destroyed mid-stream: neither hangs nor leaks
}

TEST_CASE("batch_size = nullopt loads unbatched samples through default_convert",
          "[actors][loader][unbatched]") {
  SECTION("map-style") {
    auto ds = std::make_shared<probe_dataset>(7);
    for (int64_t workers : {0, 2}) {
      INFO("workers " << workers);
      data_loader loader(ds, {.batch_size = std::nullopt, .num_workers = workers});
      CHECK(loader.size() == 7);
      std::vector<int64_t> labels;
      for (const auto& s : loader) {
        // (tensor [2], 0-dim int64 tensor): no batch dimension added.
        CHECK(s[0].as_tensor().sizes() == shape_t{2});
        CHECK(s[1].as_tensor().dim() == 0);
        CHECK(s[1].as_tensor().dtype() == dtype::int64);
        CHECK(test::values_of(s[0].as_tensor())[0] == double(int_of(s[1])));
        labels.push_back(int_of(s[1]));
      }
      CHECK(labels == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
      data_loader shuffled(ds, {.batch_size = std::nullopt,
                                .shuffle = true,
                                .num_workers = workers,
                                .pin_memory = true,
                                .generator = std::make_shared<generator>(1)});
      std::vector<int64_t> order;
      for (const auto& s : shuffled)
        order.push_back(int_of(s[1]));
      auto sorted = order;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == labels);
      CHECK(order != labels);
    }
  }
  SECTION("iterable") {
    auto ds = std::make_shared<range_iterable>(9, true);
    for (int64_t workers : {0, 2}) {
      INFO("workers " << workers);
      data_loader loader(ds, {.batch_size = std::nullopt, .num_workers = workers});
      std::vector<int64_t> labels;
      for (const auto& s : loader) {
        CHECK(s[1].as_tensor().dim() == 0);
        labels.push_back(int_of(s[1]));
      }
      // Split between two workers and taken round-robin, one sample each: 0, 1, 2, ...
      std::vector<int64_t> want(9);
      std::iota(want.begin(), want.end(), int64_t(0));
      CHECK(labels == want);
    }
  }
  SECTION("collate_fn gets each sample alone; drop_last and batch_sampler are rejected") {
    auto ds = std::make_shared<probe_dataset>(4);
    data_loader custom(
        ds,
        {.batch_size = std::nullopt, .num_workers = 2, .collate_fn = [](std::vector<sample> one) {
           ACTORCH_CHECK(one.size() == 1, "expected one sample");
           return sample(one[0][1].as_int() * 10);
         }});
    std::vector<int64_t> got;
    for (const auto& s : custom)
      got.push_back(s.as_int());
    CHECK(got == std::vector<int64_t>{0, 10, 20, 30});
    CHECK_THROWS_WITH(data_loader(ds, {.batch_size = std::nullopt, .drop_last = true}),
                      Contains("batch_size=None option disables auto-batching and is mutually "
                               "exclusive with drop_last"));
    auto bs = std::make_shared<batch_sampler>(std::make_shared<sequential_sampler>(4), 2, false);
    CHECK_THROWS_WITH(data_loader(ds, {.batch_size = std::nullopt, .batch_sampler = bs}),
                      Contains("batch_sampler option is mutually exclusive with batch_size"));
  }
  SECTION("default_convert keeps strings and walks tuples and dicts") {
    auto s =
        default_convert(sample::make_dict({{"x", 1.5}, {"t", sample::make_tuple({true, "a"})}}));
    CHECK(s["x"].as_tensor().dtype() == dtype::float64);
    CHECK(s["x"].as_tensor().dim() == 0);
    CHECK(s["t"][0].as_tensor().dtype() == dtype::bool_);
    CHECK(s["t"][1].as_string() == "a");
  }
}
