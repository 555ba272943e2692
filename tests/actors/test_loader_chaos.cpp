// Randomized runs of the loader against a reference: random options, uneven load times,
// workers that die once on chosen samples (replaced, batch re-issued, tasks taken from each
// other meanwhile: Note [Task stealing]), early exits from an epoch, epochs taken by a consumer
// actor instead of a range-for (Note [Loader host]) and mid-epoch resumes. A map-style run
// must give its num_workers=0 reference's batches, an iterable run PyTorch's round-robin of the
// workers' streams: in that order with in_order, each exactly once, epoch after epoch. The
// seeds are fixed; ACTORCH_LOADER_CHAOS_RUNS=n runs n of them per test.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "actors/messages.hpp"
#include "base/parse.hpp"
#include "caf/all.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;

namespace {

/// What one run draws from its seed.
struct chaos_plan {
  int64_t n = 0;
  loader_options opts;
  std::vector<int> delay_us;       // per sample index
  std::vector<int64_t> crash_once; // a worker dies on the first load of each of these
  std::vector<int> stop_after;     // per epoch: leave after that many batches (-1: none)
  std::vector<bool> by_actor;      // per epoch: a consumer actor takes it whole
  bool any_by_actor() const { return std::count(by_actor.begin(), by_actor.end(), true) > 0; }
  std::string describe() const {
    std::ostringstream os;
    os << "n=" << n << " batch_size=" << *opts.batch_size << " shuffle=" << opts.shuffle
       << " drop_last=" << opts.drop_last << " num_workers=" << opts.num_workers
       << " prefetch_factor=" << opts.prefetch_factor.value_or(2) << " in_order=" << opts.in_order
       << " persistent_workers=" << opts.persistent_workers << " crash_once=" << crash_once.size()
       << " stop_after=";
    for (int s : stop_after)
      os << s << ",";
    os << " by_actor=";
    for (bool a : by_actor)
      os << a << ",";
    return os.str();
  }
};

/// A uniform draw from lo..hi.
int pick(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

chaos_plan draw(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return ::pick(rng, lo, hi); };
  chaos_plan p;
  p.n = pick(10, 90);
  p.opts.batch_size = pick(1, 8);
  p.opts.shuffle = pick(0, 1) == 1;
  p.opts.drop_last = pick(0, 3) == 0;
  p.opts.num_workers = pick(1, 4);
  p.opts.prefetch_factor = pick(1, 3);
  p.opts.in_order = pick(0, 3) != 0;
  p.opts.persistent_workers = pick(0, 1) == 1;
  p.opts.generator = std::make_shared<generator>(seed);
  p.opts.timeout = 30; // a stall becomes this test's failure, not a hang of the suite
  for (int64_t i = 0; i < p.n; ++i) {
    const int r = pick(0, 99);
    p.delay_us.push_back(r < 60 ? 0 : r < 97 ? pick(20, 400) : pick(1000, 3000));
  }
  for (int k = pick(0, 2); k > 0; --k)
    p.crash_once.push_back(pick(0, int(p.n) - 1));
  for (int epoch = 0; epoch < 3; ++epoch)
    p.stop_after.push_back(pick(0, 3) == 0 ? pick(0, 4) : -1);
  for (int epoch = 0; epoch < 3; ++epoch)
    p.by_actor.push_back(p.stop_after[size_t(epoch)] < 0 && pick(0, 3) == 0);
  return p;
}

/// The batches of each epoch: epoch e left after stop_after[e] batches when that is >= 0, and
/// taken by a consumer actor on `sys` when by_actor[e].
std::vector<std::vector<sample>> run(data_loader& loader, const std::vector<int>& stop_after,
                                     const std::vector<bool>& by_actor = {},
                                     caf::actor_system* sys = nullptr) {
  std::vector<std::vector<sample>> epochs;
  for (size_t e = 0; e < stop_after.size(); ++e) {
    if (e < by_actor.size() && by_actor[e]) {
      epochs.push_back(actor_epoch(loader, *sys));
      continue;
    }
    epochs.emplace_back();
    for (const auto& b : loader) {
      if (int(epochs.back().size()) == stop_after[e])
        break;
      epochs.back().push_back(b);
    }
  }
  return epochs;
}

size_t count_equal(const std::vector<sample>& in, const sample& s) {
  return size_t(std::count_if(in.begin(), in.end(), [&](const sample& t) { return equal(t, s); }));
}

/// `epochs` whole epochs of the plan's loader with num_workers=0, no delays and no deaths.
std::vector<std::vector<sample>> reference_epochs(const chaos_plan& p, uint64_t seed,
                                                  size_t epochs) {
  auto ds = std::make_shared<probe_dataset>(p.n);
  ds->noise = true;
  loader_options opts = p.opts;
  opts.num_workers = 0;
  opts.prefetch_factor.reset();
  opts.persistent_workers = false;
  opts.generator = std::make_shared<generator>(seed);
  data_loader reference(ds, opts);
  return run(reference, std::vector<int>(epochs, -1));
}

/// The plan's dataset: its delays, and a worker that dies on the first load of each
/// crash_once index (`tripped` records which did). The hook owns what it reads: a worker may
/// still be in get() as its loader goes.
std::shared_ptr<probe_dataset>
chaos_dataset(const chaos_plan& p, const std::shared_ptr<std::vector<std::atomic<bool>>>& tripped) {
  auto ds = std::make_shared<probe_dataset>(p.n);
  ds->noise = true;
  ds->hook = [delay_us = p.delay_us, crash_once = p.crash_once, tripped](int64_t i) {
    if (delay_us[size_t(i)] > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us[size_t(i)]));
    for (int64_t c : crash_once)
      if (c == i && !(*tripped)[size_t(i)].exchange(true))
        throw 42; // not a std::exception: the worker dies (Note [Worker crash])
  };
  return ds;
}

int chaos_runs() {
  const char* env = std::getenv("ACTORCH_LOADER_CHAOS_RUNS");
  return env ? int(parse_int(env, "ACTORCH_LOADER_CHAOS_RUNS", 1, 1'000'000)) : 24;
}

} // namespace

TEST_CASE("randomized runs give the reference's batches whatever the workers do",
          "[actors][loader][chaos]") {
  const int runs = chaos_runs();
  int deaths = 0; // workers that died, over all runs: the test must have made some
  for (int r = 0; r < runs; ++r) {
    const uint64_t seed = uint64_t(1000 + r);
    const chaos_plan p = draw(seed);
    INFO("run " << r << ": " << p.describe());
    // Leaving an epoch early does not change the next one's batches (each epoch draws its
    // permutation anyway), so the reference loads every epoch whole.
    const auto want = reference_epochs(p, seed, p.stop_after.size());

    auto tripped = std::make_shared<std::vector<std::atomic<bool>>>(size_t(p.n));
    auto ds = chaos_dataset(p, tripped);
    std::vector<std::vector<sample>> got;
    {
      std::optional<caf::actor_system_config> cfg;
      std::optional<caf::actor_system> sys;
      if (p.any_by_actor()) {
        cfg.emplace();
        sys.emplace(*cfg);
      }
      data_loader loader(ds, p.opts);
      if (sys)
        loader.set_actor_system(*sys);
      got = run(loader, p.stop_after, p.by_actor, sys ? &*sys : nullptr);
    }
    for (const auto& t : *tripped)
      deaths += t.load() ? 1 : 0;
    REQUIRE(got.size() == want.size());
    for (size_t e = 0; e < want.size(); ++e) {
      INFO("epoch " << e);
      const int stop = p.stop_after[e];
      REQUIRE(got[e].size() ==
              (stop < 0 ? want[e].size() : std::min(size_t(stop), want[e].size())));
      for (size_t i = 0; i < got[e].size(); ++i) {
        if (p.opts.in_order)
          CHECK(equal(got[e][i], want[e][i])); // the reference's order
        else
          CHECK((count_equal(want[e], got[e][i]) == 1 && count_equal(got[e], got[e][i]) == 1));
      }
    }
  }
  if (runs >= 24)
    CHECK(deaths > 0);
}

TEST_CASE("randomized mid-epoch resumes give the batches the epoch had left",
          "[actors][loader][chaos]") {
  const int runs = chaos_runs();
  for (int r = 0; r < runs; ++r) {
    const uint64_t seed = uint64_t(5000 + r);
    const chaos_plan p = draw(seed);
    std::mt19937_64 rng(seed);
    const auto want = reference_epochs(p, seed, 2);
    const int taken = pick(rng, 0, int(want[0].size()));
    loader_options resumed_opts = p.opts; // resumed on a number of workers drawn anew
    resumed_opts.num_workers = pick(rng, 1, 4);
    INFO("run " << r << ": " << p.describe() << " resumed after " << taken
                << " batches with num_workers=" << resumed_opts.num_workers);
    auto tripped = std::make_shared<std::vector<std::atomic<bool>>>(size_t(p.n));
    auto ds = chaos_dataset(p, tripped);
    loader_state saved;
    std::vector<sample> seen;
    {
      data_loader first(ds, p.opts);
      // A batch counts as delivered once the loop has it: save right after taking the last.
      if (taken > 0)
        for (const auto& b : first) {
          seen.push_back(b);
          if (int(seen.size()) == taken)
            break;
        }
      saved = first.state();
    }
    data_loader second(ds, resumed_opts);
    test::check_resume(second, saved, seen, want[0], want[1], p.opts.in_order);
  }
}

TEST_CASE("randomized iterable runs give each worker's stream round-robin whether resumed or not",
          "[actors][loader][chaos][iterable]") {
  const int runs = chaos_runs();
  for (int r = 0; r < runs; ++r) {
    const uint64_t seed = uint64_t(9000 + r);
    std::mt19937_64 rng(seed);
    auto pick = [&](int lo, int hi) { return ::pick(rng, lo, hi); };
    const int64_t n = pick(1, 60), workers = pick(1, 4), bs = pick(1, 6);
    loader_options opts{.batch_size = bs, .num_workers = workers};
    opts.drop_last = pick(0, 3) == 0;
    opts.prefetch_factor = pick(1, 3);
    opts.in_order = pick(0, 3) != 0;
    opts.persistent_workers = pick(0, 1) == 1;
    opts.timeout = 30;
    std::vector<int> delay_us;
    for (int64_t i = 0; i < n; ++i)
      delay_us.push_back(pick(0, 99) < 70 ? 0 : pick(20, 600));
    const auto want = test::round_robin(n, workers, true, bs, opts.drop_last);
    const int taken = pick(0, int(want.size()));
    INFO("run " << r << ": n=" << n << " num_workers=" << workers << " batch_size=" << bs
                << " drop_last=" << opts.drop_last << " in_order=" << opts.in_order
                << " persistent_workers=" << opts.persistent_workers << " resumed after " << taken);
    auto ds = std::make_shared<test::range_iterable>(n, true);
    ds->hook = [delay_us](int64_t i) {
      if (delay_us[size_t(i)] > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us[size_t(i)]));
    };
    // Each epoch's batches: in round-robin order with in_order, the same batches otherwise.
    auto check_epoch = [&](std::vector<std::vector<int64_t>> got) {
      REQUIRE(got.size() == want.size());
      if (!opts.in_order) {
        std::sort(got.begin(), got.end());
        auto sorted = want;
        std::sort(sorted.begin(), sorted.end());
        CHECK(got == sorted);
      } else {
        CHECK(got == want);
      }
    };
    std::vector<std::vector<int64_t>> epoch1;
    loader_state saved;
    {
      data_loader first(ds, opts);
      check_epoch(test::epoch_labels(first));
      if (taken > 0)
        for (const auto& b : first) {
          epoch1.push_back(test::ints_of(b[1].as_tensor()));
          if (int(epoch1.size()) == taken)
            break;
        }
      saved = first.state();
    }
    data_loader second(ds, opts);
    second.load_state(saved);
    for (const auto& b : second)
      epoch1.push_back(test::ints_of(b[1].as_tensor()));
    check_epoch(epoch1);
    check_epoch(test::epoch_labels(second));
  }
}
