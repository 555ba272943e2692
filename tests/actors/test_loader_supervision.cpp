// Tests of the data loader's supervision (Notes [Worker death], [Loader timeout] in
// actors/loader/supervisor.cpp and [Batch shelf] in batch_shelf.cpp): dataset and collate errors
// naming the worker and the sample, a dead worker replaced and its batches re-issued, a stalled
// worker turned into a timeout error, for the range-for and for a consumer actor, and leaving or
// destroying a loader mid-epoch without a hang or a leak.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;

TEST_CASE("a dataset exception reaches the consumer naming the worker and the sample index",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(20);
  ds->hook = [](int64_t i) {
    if (i == 13)
      throw std::runtime_error("corrupt record");
  };
  for (int64_t workers : {0, 2}) {
    data_loader loader(ds, {.batch_size = 4, .num_workers = workers});
    const auto [batches, msg] = run_until_error(loader);
    REQUIRE_FALSE(msg.empty()); // the epoch failed
    CHECK_THAT(msg, Contains("failed on sample index 13 (batch 3): corrupt record"));
    if (workers > 0)
      CHECK_THAT(msg, Contains("DataLoader worker "));
    CHECK(batches == 3); // in order: the three batches before the failing one came first
    // The loader is usable again: the next epoch starts over (and fails at the same place).
    CHECK_THROWS_WITH(epoch_labels(loader), Contains("sample index 13"));
  }
}

TEST_CASE("after a batch's own exception the range-for's epoch goes on with the next batch, "
          "as torch's iterator does",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(10);
  ds->hook = [](int64_t i) {
    if (i == 5 || i == 0)
      throw std::runtime_error("corrupt record " + std::to_string(i));
  };
  // Workers in torch's order (round_robin, as actorch.DataLoader over a Python dataset) and in
  // the default one (task stealing, the first batches shared), threads and processes; batches
  // that came after a failed one wait in the reorder buffer, which must let them go.
  struct mode {
    int64_t workers;
    bool round_robin;
    const char* context;
  };
  for (const mode m : {mode{0, false, ""}, mode{2, true, ""}, mode{2, false, ""},
                       mode{2, false, "fork"}, mode{3, false, ""}}) {
    INFO(m.workers << " workers, round_robin " << m.round_robin << ", context " << m.context);
    data_loader loader(ds, {.batch_size = 2,
                            .num_workers = m.workers,
                            .multiprocessing_context = m.context,
                            .round_robin = m.round_robin});
    std::vector<std::string> seen; // a batch's labels, or the error
    const auto labels = [](const sample& b) {
      return std::to_string(b[1].as_tensor().data_ptr<int64_t>()[0]) + "," +
             std::to_string(b[1].as_tensor().data_ptr<int64_t>()[1]);
    };
    std::optional<data_loader::iterator> it;
    try {
      it = loader.begin(); // batch 0 holds sample 0: it fails first
    } catch (const data_loader::batch_error& e) {
      seen.emplace_back(e.what());
      it = loader.this_epoch();
    }
    for (;;) {
      try {
        ++*it;
        if (*it == loader.end())
          break;
        seen.push_back(labels(**it));
      } catch (const data_loader::batch_error& e) {
        seen.emplace_back(e.what());
      }
    }
    REQUIRE(seen.size() == 5);
    CHECK_THAT(seen[0], Contains("failed on sample index 0 (batch 0): corrupt record 0"));
    CHECK(seen[1] == "2,3");
    CHECK_THAT(seen[2], Contains("failed on sample index 5 (batch 2): corrupt record 5"));
    CHECK(seen[3] == "6,7");
    CHECK(seen[4] == "8,9");
  }
}

TEST_CASE("collate errors and out-of-range sampler indices name the batch and the sample",
          "[actors][loader]") {
  class ragged : public dataset {
  public:
    int64_t size() const override { return 6; }
    sample get(int64_t i) const override { return sample(zeros({i == 4 ? 3 : 2})); }
  };
  data_loader loader(std::make_shared<ragged>(), {.batch_size = 3, .num_workers = 1});
  auto drain = [&] {
    for (const auto& b : loader)
      CHECK(b.as_tensor().size(0) == 3);
  };
  CHECK_THROWS_WITH(drain(), Contains("failed to collate batch 1 (sample indices [3, 4, 5])") &&
                                 Contains("sample 0 has shape [2] and sample 1 has shape [3]"));

  class bad_sampler : public sampler {
  public:
    int64_t size() const override { return 3; }
    std::vector<int64_t> indices() override { return {0, 12, 1}; }
  };
  data_loader bad(std::make_shared<probe_dataset>(10),
                  {.batch_size = 2, .sampler = std::make_shared<bad_sampler>(), .num_workers = 1});
  CHECK_THROWS_WITH(bad.begin(), Contains("the sampler yielded index 12 for batch 0, out of range "
                                          "for a dataset of 10 samples"));
}

TEST_CASE("a worker that dies is replaced and its batch re-issued", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(24);
  auto crashes = std::make_shared<std::atomic<int>>(0);
  ds->hook = [crashes](int64_t i) {
    // Not a std::exception: it escapes the worker's handler and kills the actor.
    if (i == 9 && crashes->fetch_add(1) == 0)
      throw 42;
  };
  data_loader loader(ds, {.batch_size = 4, .num_workers = 2});
  auto got = epoch_labels(loader);
  CHECK(crashes->load() == 2); // died once, then the re-issued batch loaded fine
  REQUIRE(got.size() == 6);
  CHECK(got[2] == std::vector<int64_t>{8, 9, 10, 11});
  CHECK(flat(epoch_labels(loader)).size() == 24); // the replacement keeps working

  SECTION("a batch that kills every worker it meets becomes an error") {
    ds->hook = [](int64_t i) {
      if (i == 5)
        throw 7;
    };
    CHECK_THROWS_WITH(epoch_labels(loader), Contains("died 3 times while loading batch 1"));
  }
}

namespace {
/// Holds the first load of sample `at` inside the dataset until released: the test knows a
/// worker is busy with that batch, with no sleeps (see the kill tests below).
struct gate {
  explicit gate(int64_t sample_index) : at(sample_index) {}
  int64_t at;
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, released = false;
  int64_t worker = -1;
  std::map<int64_t, std::thread::id> threads; // sample index -> the thread that loaded it
  void pass(int64_t i) {
    std::unique_lock lock(m);
    threads[i] = std::this_thread::get_id();
    if (i != at || entered)
      return;
    entered = true;
    worker = get_worker_info()->id;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  }
  void wait_entered() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  void release() {
    std::lock_guard lock(m);
    released = true;
    cv.notify_all();
  }
};
} // namespace

TEST_CASE("a worker killed mid-epoch is replaced, its batch re-issued, the epoch complete",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(24);
  const std::vector<std::vector<int64_t>> want = {{0, 1, 2, 3},     {4, 5, 6, 7},
                                                  {8, 9, 10, 11},   {12, 13, 14, 15},
                                                  {16, 17, 18, 19}, {20, 21, 22, 23}};
  SECTION("the batch sent to the killed worker after the kill is re-issued") {
    // One worker, two credits. Step by step:
    // 1. batches 0 and 1 go to worker 0; it loads batch 0 and blocks inside batch 1 (gate);
    // 2. the kill lands in its mailbox, which it reads only after batch 1;
    // 3. the consumer actor returns batch 0's credit: batch 2 goes to worker 0, behind the kill;
    // 4. released, worker 0 answers batch 1 and dies, batch 2 still in its mailbox; its down
    //    message makes the sampler replace worker 0 and re-issue batch 2 to the new one.
    auto g = std::make_shared<gate>(4);
    ds->hook = [g](int64_t i) { g->pass(i); };
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    data_loader loader(ds, {.batch_size = 4, .num_workers = 1, .prefetch_factor = 2});
    loader.set_actor_system(sys);
    caf::scoped_actor self{sys};
    loader.run_epoch(self);
    std::vector<std::vector<int64_t>> got;
    std::vector<int64_t> seqs;
    caf::actor sampler;
    uint64_t run_id = 0;
    auto next = [&] {
      bool end = false;
      self->receive(
          [&](actors::batch_atom, const actors::delivery& d) {
            REQUIRE(d.error.empty());
            end = d.end_of_epoch;
            if (end)
              return;
            sampler = caf::actor_cast<caf::actor>(self->current_sender());
            run_id = d.run_id;
            seqs.push_back(d.seq);
            got.push_back(test::ints_of(d.data[1].as_tensor()));
          },
          caf::after(std::chrono::seconds(10)) >> [&] { FAIL("no batch within 10 s"); });
      return !end;
    };
    REQUIRE(next()); // batch 0, held: no credit back yet
    g->wait_entered();
    const caf::actor killed = loader.worker_for_testing(0);
    REQUIRE(killed);
    caf::anon_send_exit(killed, caf::exit_reason::kill);
    self->send(sampler, actors::credit_atom::value, run_id);
    // Asked after the credit, answered after it: batch 2 went to the worker, not yet replaced.
    CHECK(loader.worker_for_testing(0) == killed);
    g->release();
    while (next())
      self->send(sampler, actors::credit_atom::value, run_id);
    CHECK(got == want);
    CHECK(seqs == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
    CHECK(loader.worker_for_testing(0) != killed);
    CHECK(ds->gets.load() == 24); // the killed worker never loaded batch 2; its heir did
    std::lock_guard lock(g->m);
    CHECK(g->threads.at(8) != g->threads.at(4));
  }
  SECTION("range-for: killing a busy worker of two loses and repeats no batch") {
    auto g = std::make_shared<gate>(4);
    ds->hook = [g](int64_t i) { g->pass(i); };
    data_loader loader(ds, {.batch_size = 4, .num_workers = 2});
    std::vector<std::vector<int64_t>> got;
    for (const auto& b : loader) {
      got.push_back(test::ints_of(b[1].as_tensor()));
      if (got.size() == 1) {
        g->wait_entered();
        caf::anon_send_exit(loader.worker_for_testing(g->worker), caf::exit_reason::kill);
        g->release();
      }
    }
    CHECK(got == want);
    CHECK(epoch_labels(loader) == want); // the next epoch runs on the replacement
  }
}

TEST_CASE("a stalled worker raises a timeout error instead of hanging", "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(12);
  ds->hook = [](int64_t i) {
    if (i == 5)
      sleep_ms(600);
  };
  const auto t0 = clock_type::now();
  {
    data_loader loader(ds, {.batch_size = 2, .num_workers = 2, .timeout = 0.1});
    CHECK_THROWS_WITH(epoch_labels(loader),
                      Contains("DataLoader timed out after 0.1 seconds waiting for DataLoader "
                               "worker") &&
                          Contains("batch 2"));
    CHECK(seconds_since(t0) < 0.5);
  }
  // Destruction does not wait for the dataset call past its deadline (Note [Stuck workers]).
  CHECK(seconds_since(t0) < 0.5);
}

TEST_CASE("a get() that never returns: the timeout error reaches the caller's catch on time",
          "[actors][loader]") {
  // See Note [Stuck workers] in actors/data_loader.cpp. get(5) blocks until the end of the test,
  // standing in for for ever; before, unwinding out of the loader's scope waited for it.
  struct gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    std::atomic<bool> returned{false};
  };
  auto g = std::make_shared<gate>();
  auto ds = std::make_shared<probe_dataset>(12);
  ds->hook = [g](int64_t i) {
    if (i != 5)
      return;
    std::unique_lock lock(g->mu);
    g->cv.wait(lock, [&] { return g->open; });
    g->returned = true;
  };
  for (const bool persistent : {false, true}) {
    INFO("persistent_workers " << persistent);
    const auto t0 = clock_type::now();
    std::string caught;
    try {
      data_loader loader(
          ds,
          {.batch_size = 2, .num_workers = 2, .timeout = 0.5, .persistent_workers = persistent});
      for (const auto& b : loader)
        (void)b;
    } catch (const actorch::error& e) {
      caught = e.what();
    }
    CHECK_THAT(caught, Contains("DataLoader timed out after 0.5 seconds") && Contains("batch 2"));
    CHECK(seconds_since(t0) < 1.5); // the timeout and the shutdown, not the get()
    CHECK_FALSE(g->returned.load());
  }
  // Let the abandoned threads go, so that they end before the test binary does.
  {
    std::lock_guard lock(g->mu);
    g->open = true;
  }
  g->cv.notify_all();
  const auto t1 = clock_type::now();
  while (!g->returned.load() && seconds_since(t1) < 10)
    sleep_ms(1);
  CHECK(g->returned.load());
}

TEST_CASE("a queued batch's wait behind the one in progress is not a timeout", "[actors][loader]") {
  // See Note [Loader timeout]. 0.35 s a batch, a timeout of 0.6 s: each worker's second task
  // comes back 0.7 s after it was sent, but 0.35 s after its worker could begin it.
  auto ds = std::make_shared<probe_dataset>(6);
  ds->hook = [](int64_t) { sleep_ms(350); };
  data_loader loader(ds, {.batch_size = 1, .num_workers = 2, .timeout = 0.6});
  CHECK(epoch_labels(loader) == std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}, {4}, {5}});
}

TEST_CASE("a batch re-issued after a death, and those shelved meanwhile, are not timed out",
          "[actors][loader]") {
  // See Notes [Batch shelf] and [Loader timeout]. With timeout T, batches 0 and 1 are quick
  // (both workers load them together: Note [First batches shared]), then batch 2 goes to worker
  // 0 and 3 to worker 1. Worker 0 dies 0.6 T into batch 2, and its heir loads batch 2 again, in
  // 0.6 T: due at 1.2 T, past the first attempt's deadline (T), within its own (1.6 T). Worker
  // 1 finishes batch 3 at 0.75 T and batch 5 at once: both wait on the shelf while the consumer
  // waits for batch 2, and the deadlines that fire at T (batch 2's first attempt, batch 3's)
  // must fail nothing.
  const double timeout = 0.8;
  auto ds = std::make_shared<probe_dataset>(24);
  auto crashes = std::make_shared<std::atomic<int>>(0);
  ds->hook = [crashes, timeout](int64_t i) {
    if (i == 12)
      sleep_ms(int(timeout * 750));
    if (i != 8)
      return;
    sleep_ms(int(timeout * 600));
    if (crashes->fetch_add(1) == 0)
      throw 42; // not a std::exception: the worker dies
  };
  data_loader loader(ds, {.batch_size = 4, .num_workers = 2, .timeout = timeout});
  const auto got = epoch_labels(loader);
  CHECK(crashes->load() == 2);
  REQUIRE(got.size() == 6);
  for (size_t k = 0; k < got.size(); ++k)
    CHECK(got[k][0] == int64_t(4 * k));
}

TEST_CASE("leaving the loop early or destroying the loader mid-epoch neither hangs nor leaks",
          "[actors][loader]") {
  auto ds = std::make_shared<probe_dataset>(200);
  ds->hook = [](int64_t) { sleep_ms(1); };
  const auto t0 = clock_type::now();
  for (bool persistent : {false, true}) {
    data_loader loader(ds, {.batch_size = 4, .num_workers = 3, .persistent_workers = persistent});
    int n = 0;
    for (const auto& b : loader) {
      (void)b;
      if (++n == 2)
        break;
    }
    // A new epoch after an abandoned one starts over from batch 0.
    auto it = loader.begin();
    CHECK((*it)[1].as_tensor().data_ptr<int64_t>()[0] == 0);
    ++it;
    CHECK(loader.epoch() == 1);
    // ... and the loader is destroyed here, mid-epoch, with batches in flight.
  }
  { data_loader never_started(ds, {.num_workers = 2}); }
  CHECK(seconds_since(t0) < 3.0);
}

TEST_CASE("a consumer actor gets a stalled worker's timeout as the epoch's error",
          "[actors][loader]") {
  // The coordinator actor keeps the deadlines for a consumer actor (Note [Loader timeout]): batch 1
  // (worker 1's first, which no other worker takes: Note [Task stealing]) stalls for 1.5 s
  // against a timeout of 0.3 s; batch 0 comes first.
  auto ds = std::make_shared<probe_dataset>(8);
  ds->hook = [](int64_t i) {
    if (i == 2)
      sleep_ms(1500);
  };
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  data_loader loader(ds, {.batch_size = 2, .num_workers = 2, .timeout = 0.3});
  loader.set_actor_system(sys);
  caf::scoped_actor self{sys};
  const auto t0 = clock_type::now();
  loader.run_epoch(self);
  std::vector<std::vector<int64_t>> got;
  std::string error;
  for (bool done = false; !done;)
    self->receive(
        [&](actors::batch_atom, const actors::delivery& d) {
          if (!d.error.empty() || d.end_of_epoch) {
            error = d.error;
            done = true;
            return;
          }
          got.push_back(test::ints_of(d.data[1].as_tensor()));
          self->send(caf::actor_cast<caf::actor>(self->current_sender()),
                     actors::credit_atom::value, d.run_id);
        },
        caf::after(std::chrono::seconds(10)) >> [&] { FAIL("no delivery within 10 s"); });
  CHECK(got == std::vector<std::vector<int64_t>>{{0, 1}});
  CHECK_THAT(error, Contains("DataLoader timed out after 0.3 seconds waiting for DataLoader "
                             "worker 1 to load batch 1 (sample indices [2, 3])"));
  CHECK(seconds_since(t0) < 1.2);
}
