// Tests of the data loader's pipeline: option checks, epochs through range-for, ordering with
// and without in_order under uneven delays, task stealing, bounded memory under a slow
// consumer, identical batches whatever num_workers is, mid-epoch save/resume, worker info,
// worker CPUs, pinning, streaming and custom collate, consumer actors. Errors, deaths, timeouts
// and shutdown are in test_loader_supervision.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include <sched.h>

#include "actors/messages.hpp"
#include "core/data/buffer_pool.hpp"
#include "core/data/collate.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/ops/shape_ops.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;
using Catch::Contains;

using clock_type = std::chrono::steady_clock;

TEST_CASE("loader options are checked, naming the option", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(10);
  auto s = std::make_shared<sequential_sampler>(10);
  auto bs = std::make_shared<batch_sampler>(s, 2, false);
  CHECK_THROWS_WITH(data_loader(ds, {.num_workers = -1}),
                    Contains("num_workers option should be non-negative"));
  CHECK_THROWS_WITH(data_loader(ds, {.timeout = -1}),
                    Contains("timeout option should be non-negative"));
  CHECK_THROWS_WITH(data_loader(ds, {.prefetch_factor = 2}),
                    Contains("prefetch_factor option could only be specified in multiprocessing"));
  CHECK_THROWS_WITH(data_loader(ds, {.num_workers = 1, .prefetch_factor = 0}),
                    Contains("prefetch_factor option should be positive"));
  CHECK_THROWS_WITH(data_loader(ds, {.persistent_workers = true}),
                    Contains("persistent_workers option needs num_workers > 0"));
  CHECK_THROWS_WITH(data_loader(ds, {.shuffle = true, .sampler = s}),
                    Contains("sampler option is mutually exclusive with shuffle"));
  for (auto bad : {loader_options{.batch_size = 4, .batch_sampler = bs},
                   loader_options{.shuffle = true, .batch_sampler = bs},
                   loader_options{.sampler = s, .batch_sampler = bs},
                   loader_options{.batch_sampler = bs, .drop_last = true}})
    CHECK_THROWS_WITH(data_loader(ds, bad),
                      Contains("batch_sampler option is mutually exclusive with batch_size, "
                               "shuffle, sampler, and drop_last"));
  CHECK_THROWS_WITH(data_loader(ds, {.batch_size = 0}),
                    Contains("batch_size should be a positive"));
  CHECK_THROWS_WITH(data_loader(ds, {.worker_cpus = {usable_cpus()[0]}}),
                    Contains("worker_cpus option needs num_workers > 0"));
  for (int bad : {-1, 1 << 20})
    CHECK_THROWS_WITH(data_loader(ds, {.num_workers = 1, .worker_cpus = {bad}}),
                      Contains("worker_cpus option names CPU " + std::to_string(bad) +
                               ", which this thread may not run on (usable_cpus(): ["));
  CHECK_NOTHROW(data_loader(ds, {.batch_sampler = bs, .num_workers = 1, .prefetch_factor = 3}));
}

TEST_CASE("a range-for over the loader is one epoch of collated batches", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(10);
  for (int64_t workers : {0, 1, 3}) {
    for (bool drop_last : {false, true}) {
      data_loader loader(ds, {.batch_size = 3, .num_workers = workers, .drop_last = drop_last});
      CHECK(loader.size() == (drop_last ? 3 : 4));
      for (int epoch = 0; epoch < 2; ++epoch) {
        auto got = epoch_labels(loader);
        std::vector<std::vector<int64_t>> want = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}};
        if (!drop_last)
          want.push_back({9});
        INFO("workers " << workers << " drop_last " << drop_last << " epoch " << epoch);
        CHECK(got == want);
      }
      CHECK(loader.epoch() == 2);
    }
  }
  SECTION("the batch is a tuple of stacked tensors") {
    data_loader loader(ds, {.batch_size = 4, .num_workers = 2});
    auto it = loader.begin();
    CHECK((*it)[0].as_tensor().sizes() == shape_t{4, 2});
    CHECK(test::values_of((*it)[0].as_tensor()) == std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3});
  }
}

TEST_CASE("shuffle draws a new permutation every epoch from the loader's generator",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(50);
  data_loader loader(ds, {.batch_size = 8,
                          .shuffle = true,
                          .num_workers = 2,
                          .generator = std::make_shared<generator>(0)});
  auto e0 = flat(epoch_labels(loader));
  auto e1 = flat(epoch_labels(loader));
  std::vector<int64_t> all(50);
  std::iota(all.begin(), all.end(), int64_t(0));
  auto s0 = e0, s1 = e1;
  std::sort(s0.begin(), s0.end());
  std::sort(s1.begin(), s1.end());
  CHECK(s0 == all);
  CHECK(s1 == all);
  CHECK(e0 != all);
  CHECK(e0 != e1);
}

TEST_CASE("a run yields the same batches whatever num_workers is", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(40);
  ds->noise = true; // randomness through the batch's own generator
  const auto runs = two_epochs_per_num_workers(ds, 6, 7, {0, 1, 4});
  REQUIRE(runs[0].size() == 14);
  for (size_t r = 1; r < runs.size(); ++r) {
    REQUIRE(runs[r].size() == runs[0].size());
    for (size_t i = 0; i < runs[0].size(); ++i)
      CHECK(equal(runs[r][i], runs[0][i]));
  }
  // The noise is real: two batches of the same indices in different epochs differ.
  CHECK_FALSE(equal(runs[0][0], runs[0][7]));
}

TEST_CASE("in_order delivers in sampler order under uneven delays, false as ready",
          "[actors][loader]") {
  // The delay goes with the batch, not the worker: a worker with nothing left takes batches
  // queued at another (Note [Task stealing]), so a slow worker may load any of them.
  // Batch 2 is slow (past the epoch's first batches, which every worker loads together: Note
  // [First batches shared]).
  auto ds = std::make_shared<probe_dataset>(16);
  ds->hook = [](int64_t i) {
    if (i == 4 || i == 5)
      sleep_ms(15); // batch 2 is slow, whoever loads it
  };
  std::vector<int64_t> in_order_seen, as_ready_seen;
  {
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2, .in_order = true});
    for (const auto& b : epoch_labels(loader))
      in_order_seen.push_back(b[0] / 2);
  }
  {
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2, .in_order = false});
    for (const auto& b : epoch_labels(loader))
      as_ready_seen.push_back(b[0] / 2);
  }
  std::vector<int64_t> order(8);
  std::iota(order.begin(), order.end(), int64_t(0));
  CHECK(in_order_seen == order);
  CHECK(std::set<int64_t>(as_ready_seen.begin(), as_ready_seen.end()).size() == 8);
  // Batch 3, loaded at once by the other worker, arrives before batch 2.
  CHECK(as_ready_seen != order);
  const auto at = [&](int64_t b) {
    return std::find(as_ready_seen.begin(), as_ready_seen.end(), b) - as_ready_seen.begin();
  };
  CHECK(at(3) < at(2));
}

TEST_CASE("a worker with nothing left loads a batch queued behind another's slow one",
          "[actors][loader]") {
  // See Note [Task stealing]. Batches of one sample; batches 0 and 2 go to worker 0, 1 and 3 to
  // worker 1 (the least busy worker, ties to the lowest id). Worker 1 begins once worker 0 has;
  // worker 0's first sample waits until worker 1 has loaded three. In order, the consumer waits
  // for worker 0's batch, so no credit comes back: worker 1 gets a third sample only by taking
  // the one queued at worker 0. Each wait gives up after 5 s.
  auto ds = std::make_shared<probe_dataset>(8);
  struct shared_state {
    std::atomic<bool> began0{false}, first0{true}, first1{true}, waited_out{false};
    std::atomic<int> by_worker1{0};
    std::array<std::atomic<int>, 8> loads{};
    void wait_until(const std::function<bool()>& ready) {
      const auto t0 = clock_type::now();
      while (!ready()) {
        if (seconds_since(t0) > 5.0) {
          waited_out.store(true);
          return;
        }
        sleep_ms(1);
      }
    }
  };
  auto st = std::make_shared<shared_state>();
  ds->hook = [st](int64_t i) {
    st->loads[size_t(i)].fetch_add(1);
    if (get_worker_info()->id == 1) {
      if (st->first1.exchange(false))
        st->wait_until([&] { return st->began0.load(); });
      st->by_worker1.fetch_add(1);
      return;
    }
    if (!st->first0.exchange(false))
      return;
    st->began0.store(true);
    st->wait_until([&] { return st->by_worker1.load() >= 3; });
  };
  data_loader loader(ds, {.batch_size = 1, .num_workers = 2});
  CHECK(epoch_labels(loader) ==
        std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK_FALSE(st->waited_out.load());
  for (const auto& n : st->loads)
    CHECK(n.load() == 1); // each loaded once
}

TEST_CASE("memory stays bounded by prefetch_factor x num_workers in flight with a slow consumer",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(120);
  const int64_t workers = 2, prefetch = 2, bs = 4, credits = workers * prefetch;
  data_loader loader(ds, {.batch_size = bs, .num_workers = workers, .prefetch_factor = prefetch});
  int64_t consumed = 0, max_ahead = 0;
  for (const auto& b : loader) {
    consumed += b[1].as_tensor().numel();
    sleep_ms(3); // a slow consumer: the workers would race ahead without credits
    max_ahead = std::max(max_ahead, ds->gets.load() - consumed);
  }
  CHECK(consumed == 120);
  // Loaded but not yet in hand: at most the batches holding credit.
  CHECK(max_ahead <= credits * bs);
  const auto st = loader.pool_stats();
  // Two buffers per batch (x and the labels); never more than `credits` batches in flight
  // plus the one in hand.
  CHECK(st.peak_live <= 2 * (credits + 1));
  CHECK(st.live == 0);
  // Recycled: 30 batches were made from at most 2 x (credits + 1) buffers.
  CHECK(st.allocations <= 2 * (credits + 1));
  CHECK(st.reuses >= 2 * 30 - 2 * (credits + 1));
}

TEST_CASE("a loader resumes mid-epoch with exactly the batches it would have seen",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(30);
  ds->noise = true;
  auto make = [&](int64_t workers, bool in_order) {
    return data_loader(ds, {.batch_size = 4,
                            .shuffle = true,
                            .num_workers = workers,
                            .generator = std::make_shared<generator>(3),
                            .in_order = in_order});
  };
  for (int64_t workers : {0, 2}) {
    for (bool in_order : {true, false}) {
      INFO("workers " << workers << " in_order " << in_order);
      const auto [reference_e1, reference_e2] = [&] {
        auto ref = make(0, true);
        return epochs_after_the_first(ref);
      }();
      loader_state saved;
      std::vector<sample> seen;
      {
        auto first = make(workers, in_order);
        for (const auto& b : first)
          (void)b; // epoch 0
        int n = 0;
        for (const auto& b : first) {
          seen.push_back(b);
          if (++n == 3) {
            saved = first.state();
            break;
          }
        }
      }
      CHECK(saved.epoch == 1);
      CHECK(saved.delivered.size() == 3);
      auto second = make(workers, in_order);
      check_resume(second, saved, seen, reference_e1, reference_e2, in_order);
    }
  }
  // A state that names a batch the epoch does not have is another loader's: an error, rather
  // than a resume that silently loads other batches.
  auto other = make(2, true);
  loader_state foreign;
  foreign.epoch = 1;
  foreign.delivered = {0, 8};
  other.load_state(foreign);
  CHECK_THROWS_WITH(other.begin(),
                    Contains("lists batch 8 as delivered, but epoch 1 has 8 batches"));
}

TEST_CASE("get_worker_info gives each worker its id, count, seed and dataset", "[actors][loader]") {
  // worker_init_fn and get() run on the workers' threads: record there, check here (Catch2's
  // assertions are not thread-safe).
  struct record {
    std::mutex m;
    std::map<std::thread::id, int64_t> init_id;           // per thread, from worker_init_fn
    std::map<std::thread::id, std::set<int64_t>> get_ids; // per thread, seen in get()
  };
  class info_dataset : public dataset {
  public:
    explicit info_dataset(record* r) : r_(r) {}
    int64_t size() const override { return 32; }
    sample get(int64_t) const override {
      const worker_info* w = get_worker_info();
      if (!w)
        return sample::make_tuple({-1, -1, 0});
      ACTORCH_CHECK(w->dataset.get() == this, "wrong dataset");
      std::lock_guard lock(r_->m);
      r_->get_ids[std::this_thread::get_id()].insert(w->id);
      return sample::make_tuple({w->id, w->num_workers, int64_t(w->seed)});
    }

  private:
    record* r_;
  };
  record rec;
  auto ds = std::make_shared<info_dataset>(&rec);
  std::set<int64_t> init_ids, init_info_ids;
  data_loader loader(ds, {.batch_size = 2, .num_workers = 3, .worker_init_fn = [&](int64_t id) {
                            std::lock_guard lock(rec.m);
                            init_ids.insert(id);
                            init_info_ids.insert(get_worker_info() ? get_worker_info()->id : -1);
                            rec.init_id[std::this_thread::get_id()] = id;
                          }});
  std::set<int64_t> ids, seeds;
  int64_t k = 0;
  for (const auto& b : loader) {
    auto v = test::ints_of(b[0].as_tensor());
    ids.insert(v.begin(), v.end());
    CHECK(test::ints_of(b[1].as_tensor()) == std::vector<int64_t>{3, 3});
    auto s = test::ints_of(b[2].as_tensor());
    // Past the first batches (which all workers load: Note [First batches shared]), both
    // samples of a batch come from one worker.
    if (k++ >= 3)
      CHECK(v[1] == v[0]);
    CHECK(s[1] - v[1] == s[0] - v[0]); // seed - id: one base seed
    seeds.insert(s[0] - v[0]);
  }
  // Each worker loads at least its first task (Note [Task stealing] in
  // actors/loader/task_board.cpp), and each thread's get() sees its own worker's id.
  CHECK(ids == std::set<int64_t>{0, 1, 2});
  CHECK(seeds.size() == 1); // seed - id is the epoch's base seed, shared by all workers
  std::lock_guard lock(rec.m);
  CHECK(init_ids == std::set<int64_t>{0, 1, 2}); // worker_init_fn runs in every worker
  CHECK(init_info_ids == init_ids);
  CHECK(rec.init_id.size() == 3); // on a thread of its own
  for (const auto& [thread, seen] : rec.get_ids) {
    REQUIRE(rec.init_id.count(thread) == 1);
    CHECK(seen == std::set<int64_t>{rec.init_id.at(thread)});
  }
  data_loader main_thread(ds, {.batch_size = 2});
  CHECK(test::ints_of((*main_thread.begin())[0].as_tensor()) == std::vector<int64_t>{-1, -1});
}

TEST_CASE(
    "worker_cpus pins each worker's thread before worker_init_fn, and unset, each keeps to one "
    "CPU for its first batch only",
    "[actors][loader]") {
  // Sample i: (worker id, the CPUs its thread may run on when it loads i, as a tensor).
  class cpus_dataset : public dataset {
  public:
    int64_t size() const override { return 24; }
    sample get(int64_t) const override {
      const auto cpus = usable_cpus();
      return sample::make_tuple(
          {get_worker_info()->id, as_tensor(std::vector<int64_t>(cpus.begin(), cpus.end()))});
    }
  };
  auto ds = std::make_shared<cpus_dataset>();
  const std::vector<int> usable = usable_cpus();
  const std::vector<int64_t> all(usable.begin(), usable.end());
  // What each worker's thread may run on, per worker id, over an epoch (batch_size 1).
  auto masks = [&](loader_options o) {
    std::map<int64_t, std::set<std::vector<int64_t>>> out;
    for (const auto& b : data_loader(ds, std::move(o)))
      out[b[0].as_tensor().item<int64_t>()].insert(test::ints_of(b[1].as_tensor()[0]));
    return out;
  };
  // Unset (Note [Worker CPUs]): a worker's first batch (one sample here) on one of the CPUs,
  // every later one on all of them.
  // A worker under load may load its first batch alone (the others take the rest), so only
  // some worker is sure to have loaded a later one.
  bool later_on_all = false;
  for (const auto& [id, seen] : masks({.num_workers = 3})) {
    for (const auto& mask : seen)
      CHECK((mask == all || mask.size() == 1));
    if (all.size() > 1)
      CHECK(seen.size() - seen.count(all) == 1); // its first batch, on one CPU
    later_on_all |= seen.count(all) == 1;
  }
  CHECK(later_on_all);

  // Worker i on cpus[i % size]: with the usable CPUs listed twice over, as many workers as
  // entries, whatever the machine's CPU count.
  std::vector<int> cpus = usable;
  cpus.insert(cpus.end(), usable.begin(), usable.end());
  const auto pinned = masks({.num_workers = int64_t(cpus.size()), .worker_cpus = cpus});
  for (const auto& [id, seen] : pinned)
    CHECK(seen == std::set<std::vector<int64_t>>{{int64_t(cpus[size_t(id)])}});

  // worker_init_fn runs pinned and may widen the mask again: the user's choice wins.
  std::mutex m;
  std::vector<std::vector<int>> at_init;
  const auto widened =
      masks({.num_workers = 2,
             .worker_init_fn =
                 [&](int64_t) {
                   {
                     std::lock_guard lock(m);
                     at_init.push_back(usable_cpus());
                   }
                   cpu_set_t mask;
                   CPU_ZERO(&mask);
                   for (int c : usable)
                     CPU_SET(c, &mask);
                   ACTORCH_CHECK(sched_setaffinity(0, sizeof mask, &mask) == 0, "setaffinity");
                 },
             .worker_cpus = {usable.back()}});
  for (const auto& [id, seen] : widened)
    CHECK(seen == std::set<std::vector<int64_t>>{all});
  std::lock_guard lock(m);
  CHECK(at_init == std::vector<std::vector<int>>(2, std::vector<int>{usable.back()}));
}

TEST_CASE("pin_memory batches live in pooled pinned memory, and collate_fn replaces the default",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(10);
  data_loader pinned(ds, {.batch_size = 5, .num_workers = 2, .pin_memory = true});
  data_loader plain(ds, {.batch_size = 5, .num_workers = 2});
  auto a = epoch_labels(pinned), b = epoch_labels(plain);
  CHECK(a == b);
  CHECK(pinned.pool_stats().allocations > 0);

  data_loader custom(ds, {.batch_size = 5,
                          .num_workers = 2,
                          .collate_fn =
                              [](std::vector<sample> samples) {
                                int64_t sum = 0;
                                for (const auto& s : samples)
                                  sum += s[1].as_int();
                                return sample(sum);
                              },
                          .pin_memory = true});
  std::vector<int64_t> sums;
  for (const auto& s : custom)
    sums.push_back(s.as_int());
  CHECK(sums == std::vector<int64_t>{0 + 1 + 2 + 3 + 4, 5 + 6 + 7 + 8 + 9});
}

TEST_CASE("with the default collate_fn a worker holds one sample at a time, not a batch",
          "[actors][loader]") {
  // Note [Streaming collate]
  // ~~~~~~~~~~~~~~~~~~~~~~~~
  // Each sample is copied into its batch as it is loaded, then dropped.
  class tracked : public dataset {
  public:
    int64_t size() const override { return 12; }
    sample get(int64_t i) const override {
      std::lock_guard lock(m_);
      const auto alive =
          std::count_if(given_.begin(), given_.end(), [](const auto& w) { return !w.expired(); });
      most_alive_ = std::max(most_alive_, int64_t(alive));
      tensor x = full({4}, double(i));
      given_.push_back(x.storage());
      return sample::make_tuple({x, i});
    }
    int64_t most_alive() const {
      std::lock_guard lock(m_);
      return most_alive_;
    }

  private:
    mutable std::mutex m_;
    mutable std::vector<std::weak_ptr<storage>> given_;
    mutable int64_t most_alive_ = 0;
  };
  std::vector<int64_t> all(12);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t workers : {0, 1}) {
    auto ds = std::make_shared<tracked>();
    data_loader loader(ds, {.batch_size = 4, .num_workers = workers});
    CHECK(flat(epoch_labels(loader)) == all);
    CHECK(ds->most_alive() == 0);
  }
  // A collate_fn gets the batch's samples as a list, as PyTorch's does.
  auto ds = std::make_shared<tracked>();
  data_loader listed(
      ds, {.batch_size = 4, .num_workers = 1, .collate_fn = [](std::vector<sample> samples) {
             return default_collate(std::move(samples));
           }});
  CHECK(flat(epoch_labels(listed)) == all);
  CHECK(ds->most_alive() == 3);
}

TEST_CASE("a distributed sampler gets set_epoch from the loader every epoch", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(20);
  auto s = std::make_shared<distributed_sampler>(20, 2, 1, true, 5);
  data_loader loader(ds, {.batch_size = 5, .sampler = s, .num_workers = 1});
  auto e0 = flat(epoch_labels(loader));
  CHECK(s->epoch() == 0);
  auto e1 = flat(epoch_labels(loader));
  CHECK(s->epoch() == 1);
  CHECK(e0.size() == 10);
  CHECK(e0 != e1);
  distributed_sampler replay(20, 2, 1, true, 5);
  replay.set_epoch(1);
  CHECK(e1 == replay.indices());
  SECTION("once the user sets the epoch, as torch's users do, the loader uses theirs") {
    auto mine = std::make_shared<distributed_sampler>(20, 2, 1, true, 5);
    data_loader own(ds, {.batch_size = 5, .sampler = mine, .num_workers = 1});
    for (const int64_t e : {7, 3}) {
      mine->set_epoch(e);
      const auto got = flat(epoch_labels(own));
      CHECK(mine->epoch() == e);
      distributed_sampler expected(20, 2, 1, true, 5);
      expected.set_epoch(e);
      CHECK(got == expected.indices());
    }
  }
}

TEST_CASE("one loader serves a range-for and a consumer actor in turn", "[actors][loader]") {
  // Note [Loader host]
  // ~~~~~~~~~~~~~~~~~~
  // The range-for's coordinator runs on its thread, a consumer actor's in
  // a coordinator actor; switching stops the other, persistent workers or not.
  for (const bool persistent : {false, true}) {
    auto ds = std::make_shared<probe_dataset>(12);
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    data_loader loader(ds, {.batch_size = 4, .num_workers = 2, .persistent_workers = persistent});
    loader.set_actor_system(sys);
    const std::vector<std::vector<int64_t>> want = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
    CHECK(epoch_labels(loader) == want);
    std::vector<std::vector<int64_t>> got;
    for (const auto& b : actor_epoch(loader, sys))
      got.push_back(test::ints_of(b[1].as_tensor()));
    CHECK(got == want);
    CHECK(epoch_labels(loader) == want);
    CHECK(loader.epoch() == 3);
    CHECK(ds->gets.load() == 36);
  }
}

namespace {

// torch's SimpleCustomBatch: the inputs and targets of a batch stacked by a collate_fn, with a
// pin_memory() of its own. Here it pins `inp` only and counts its calls, and remembers where
// collate put its tensors, so the test sees what the hook did.
struct simple_custom_batch : data::custom_value {
  tensor inp, tgt;
  const void* collated_inp = nullptr;
  const void* collated_tgt = nullptr;
  int pinned = 0;

  explicit simple_custom_batch(const std::vector<sample>& samples) {
    std::vector<tensor> xs, ys;
    for (const auto& s : samples) {
      xs.push_back(s[0].as_tensor());
      ys.push_back(scalar_tensor(s[1].as_int()));
    }
    inp = stack(xs, 0);
    tgt = stack(ys, 0);
    collated_inp = inp.data_ptr();
    collated_tgt = tgt.data_ptr();
  }
  std::string type_name() const override { return "SimpleCustomBatch"; }
  void for_each_tensor(const std::function<void(tensor&)>& f) override {
    f(inp);
    f(tgt);
  }
  void pin_memory(const pin_fn& pin) override {
    inp = pin(inp);
    ++pinned;
  }
};

} // namespace

TEST_CASE("a batch type of the user's own passes through collate_fn and pin_memory, with a "
          "pin_memory hook of its own",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(12);
  const auto collate = [](std::vector<sample> samples) {
    return sample(std::make_shared<simple_custom_batch>(samples));
  };
  for (const int64_t workers : {int64_t(0), int64_t(2)}) {
    INFO("num_workers " << workers);
    data_loader loader(
        ds, {.batch_size = 4, .num_workers = workers, .collate_fn = collate, .pin_memory = true});
    std::vector<double> labels;
    for (const sample& b : loader) {
      auto& batch = b.as_custom<simple_custom_batch>();
      CHECK(batch.pinned == 1);                          // the hook ran, once
      CHECK(batch.inp.data_ptr() != batch.collated_inp); // inp: a pinned copy
      CHECK(batch.tgt.data_ptr() == batch.collated_tgt); // tgt: left as the hook chose
      CHECK(batch.inp.sizes() == shape_t{4, 2});
      for (double v : values_of(batch.tgt))
        labels.push_back(v);
    }
    CHECK(labels == values_of(arange(12)));
    CHECK(loader.pool_stats().allocations > 0);
  }
  // The default hook pins every tensor the value lists; str() and equal() see them too.
  struct plain_batch : data::custom_value {
    tensor x = arange(3);
    std::string type_name() const override { return "Plain"; }
    void for_each_tensor(const std::function<void(tensor&)>& f) override { f(x); }
  };
  auto pool = data::buffer_pool::make(pinned_allocator());
  auto value = std::make_shared<plain_batch>();
  const void* before = value->x.data_ptr();
  const sample pinned = data::pin_memory(sample(value), *pool);
  CHECK(pinned.as_custom<plain_batch>().x.data_ptr() != before);
  CHECK(pinned.str() == "Plain(tensor([0, 1, 2]))");
  CHECK(equal(pinned, sample(std::make_shared<plain_batch>())));
  REQUIRE_THROWS_WITH(pinned.as_custom<simple_custom_batch>(),
                      Contains("the custom value is a Plain, not the type asked for"));
  REQUIRE_THROWS_WITH(data::default_collate({sample(value), sample(value)}),
                      Contains("default_collate: batch: batch must contain tensors, numbers, "
                               "strings, dicts or tuples; found a Plain (a type of your own: give "
                               "the loader a collate_fn that batches it)"));
}

TEST_CASE("a batch type of the user's own cannot leave a worker process, and says so",
          "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(8);
  data_loader loader(ds, {.batch_size = 4,
                          .num_workers = 1,
                          .collate_fn =
                              [](std::vector<sample> samples) {
                                return sample(std::make_shared<simple_custom_batch>(samples));
                              },
                          .timeout = kHeal,
                          .retry_timeouts = true,
                          .multiprocessing_context = "fork"});
  const epoch_failure f = run_until_error(loader);
  CHECK(f.batches == 0);
  CHECK_THAT(f.message, Contains("a batch holding a SimpleCustomBatch (a type of your own) cannot "
                                 "leave a worker process"));
}

namespace {

// A batch type that can leave a worker process: its label travels as bytes, its tensor beside.
struct labelled_batch : data::custom_value {
  std::string label;
  tensor values;
  pid_t made_in = ::getpid();
  std::string type_name() const override { return "LabelledBatch"; }
  void for_each_tensor(const std::function<void(tensor&)>& f) override { f(values); }
  std::optional<data::custom_wire> to_wire() const override {
    return data::custom_wire{"test-labelled", label, {values}};
  }
};

} // namespace

TEST_CASE("a batch type with to_wire and a codec leaves a worker process as itself",
          "[actors][loader][process]") {
  data::register_custom_codec("test-labelled", [](data::custom_wire w) {
    auto b = std::make_shared<labelled_batch>();
    b->label = std::move(w.bytes);
    b->values = w.tensors.at(0);
    return b;
  });
  auto ds = std::make_shared<probe_dataset>(8);
  data_loader loader(
      ds, {.batch_size = 4,
           .num_workers = 2,
           .collate_fn =
               [](std::vector<sample> samples) {
                 auto b = std::make_shared<labelled_batch>();
                 b->label = "first " + samples[0][1].str();
                 b->values = stack({samples[0][0].as_tensor(), samples.back()[0].as_tensor()}, 0);
                 return sample(b);
               },
           .timeout = kHeal,
           .retry_timeouts = true,
           .multiprocessing_context = "fork"});
  std::vector<std::string> labels;
  for (const sample& s : loader) {
    const auto& b = s.as_custom<labelled_batch>();
    CHECK(b.made_in == ::getpid()); // rebuilt here by the codec
    CHECK(b.values.sizes() == shape_t{2, 2});
    labels.push_back(b.label);
  }
  CHECK(labels == std::vector<std::string>{"first 0", "first 4"});

  // A value sent under a codec this process does not have fails the batch, naming it.
  data_loader unknown(ds, {.batch_size = 4,
                           .num_workers = 1,
                           .collate_fn =
                               [](std::vector<sample>) {
                                 struct stray : labelled_batch {
                                   std::optional<data::custom_wire> to_wire() const override {
                                     return data::custom_wire{"no-such-codec", "", {}};
                                   }
                                 };
                                 return sample(std::make_shared<stray>());
                               },
                           .timeout = kHeal,
                           .retry_timeouts = true,
                           .multiprocessing_context = "fork"});
  const epoch_failure f = run_until_error(unknown);
  CHECK_THAT(f.message, Contains("sent as 'no-such-codec', and this process has no codec"));
}

TEST_CASE("round_robin sends the k-th batch to worker k % num_workers, as PyTorch's loader",
          "[actors][loader]") {
  // Worker 0 is slow on every batch: the least busy worker, or stealing, would move its
  // batches to the others; round_robin keeps each where PyTorch's order puts it.
  class who_dataset : public dataset {
  public:
    int64_t size() const override { return 36; }
    sample get(int64_t) const override {
      const int64_t id = get_worker_info()->id;
      if (id == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      return id;
    }
  };
  for (const bool round_robin : {true, false}) {
    data_loader loader(std::make_shared<who_dataset>(),
                       {.batch_size = 2, .num_workers = 3, .round_robin = round_robin});
    std::vector<int64_t> got;
    for (const auto& b : loader)
      got.push_back(test::ints_of(b.as_tensor())[0]);
    REQUIRE(got.size() == 18);
    int64_t in_turn = 0;
    for (size_t k = 0; k < got.size(); ++k)
      in_turn += got[k] == int64_t(k % 3);
    if (round_robin)
      CHECK(in_turn == 18);
    else
      CHECK(in_turn < 18); // worker 0's share went to the others
  }
}

TEST_CASE("timing() keeps the starvation figure: the share of the step spent waiting",
          "[actors][loader]") {
  // One worker takes 20 ms a batch. A consumer whose own step is 10 ms waits the other 10 ms
  // for every batch (starvation 0.5); one whose step is 40 ms finds each batch ready (0).
  auto ds = std::make_shared<probe_dataset>(24);
  ds->hook = [](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  auto consume = [&](int work_ms) {
    data_loader loader(ds, {.batch_size = 1, .num_workers = 1});
    for (auto it = loader.begin(); it != loader.end(); ++it)
      std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
    return loader.timing();
  };
  const loader_timing fast = consume(10);
  CHECK(fast.batches == 24);
  CHECK(fast.first_batch_s >= 0.018);
  CHECK(fast.starvation() == Approx(0.5).margin(0.2));
  CHECK(fast.work_s == Approx(23 * 0.010).margin(0.1));
  const loader_timing slow = consume(40);
  CHECK(slow.batches == 24);
  CHECK(slow.starvation() < 0.15);
}

TEST_CASE("the epoch's first batches are loaded by every worker at once", "[actors][loader]") {
  // See Note [First batches shared]: batch 0 (and 1) take samples from both workers; later
  // batches are one worker's each. The batches are those of num_workers = 0 all the same.
  auto ds = std::make_shared<probe_dataset>(48);
  ds->noise = true;
  std::mutex m;
  std::map<int64_t, int64_t> loaded_by; // index -> worker id
  ds->hook = [&](int64_t i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard lock(m);
    loaded_by[i] = get_worker_info()->id;
  };
  const auto run = [&](int64_t workers) {
    data_loader loader(
        ds, {.batch_size = 8, .num_workers = workers, .generator = std::make_shared<generator>(5)});
    std::vector<tensor> out;
    for (const auto& b : loader)
      out.push_back(b[0].as_tensor());
    return out;
  };
  const auto shared = run(2);
  std::set<int64_t> first, later;
  for (int64_t i = 0; i < 8; ++i)
    first.insert(loaded_by.at(i));
  CHECK(first == std::set<int64_t>{0, 1});
  for (int64_t b = 2; b < 6; ++b) {
    std::set<int64_t> by;
    for (int64_t i = b * 8; i < b * 8 + 8; ++i)
      by.insert(loaded_by.at(i));
    CHECK(by.size() == 1);
  }
  ds->hook = {};
  const auto alone = run(0);
  REQUIRE(alone.size() == shared.size());
  for (size_t i = 0; i < alone.size(); ++i)
    CHECK(equal(alone[i], shared[i]));
}
