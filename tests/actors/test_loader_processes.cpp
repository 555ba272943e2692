// Dataset workers in forked processes (multiprocessing_context = "fork"; Note [Worker processes]
// in actors/loader/worker_process.cpp): the same batches as worker threads, and a crash, a hang
// or an exception in the dataset's code that the program survives.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/files.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;

namespace {

/// A deadline for the loaders whose test is not about deadlines. fork() copies one thread: a
/// lock another thread held then stays held in the child (Note [Worker processes]). glibc's
/// malloc takes care of its own, but GCC 12's AddressSanitizer allocator does not (and a child
/// hung once in 15 TSan runs too): a child forked while another thread allocates can hang in its
/// first allocation; with a deadline it is killed and replaced, as any hung worker process is.
constexpr double kHeal = 20;

/// True for the first caller of all processes (a file made with O_EXCL), false after: a fault
/// that strikes once, whichever process meets it first.
bool first_time(const std::string& name) {
  const std::string path = (scratch_dir("processes") / name).string();
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0)
    return false;
  ::close(fd);
  return true;
}

void forget(const std::string& name) {
  std::filesystem::remove(scratch_dir("processes") / name);
}

/// The children of this process, all its threads counted.
std::set<pid_t> child_processes() {
  std::set<pid_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    for (pid_t p; in >> p;)
      out.insert(p);
  }
  return out;
}

/// Sample i: (tensor [2] = {i, i}, label i, the pid of the process that loaded it).
class pid_dataset : public dataset {
public:
  int64_t size() const override { return 16; }
  sample get(int64_t i) const override {
    return sample::make_tuple({full({2}, double(i)), i, int64_t(::getpid())});
  }
};

} // namespace

TEST_CASE("worker processes deliver the batches worker threads do", "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(40);
  ds->noise = true; // drawn from the batch generator: the seeds reach the children
  for (const bool persistent : {false, true}) {
    INFO("persistent_workers " << persistent);
    auto epochs = [&](const std::string& context) {
      data_loader loader(ds, {.batch_size = 4,
                              .shuffle = true,
                              .num_workers = 2,
                              .timeout = kHeal,
                              .multiprocessing_context = context,
                              .generator = std::make_shared<generator>(3),
                              .persistent_workers = persistent});
      std::vector<sample> out;
      for (int epoch = 0; epoch < 2; ++epoch)
        for (const auto& b : loader)
          out.push_back(b);
      return out;
    };
    const auto threads = epochs(""), processes = epochs("fork");
    REQUIRE(threads.size() == 20);
    REQUIRE(processes.size() == threads.size());
    for (size_t k = 0; k < threads.size(); ++k)
      CHECK(equal(threads[k], processes[k]));
  }
  SECTION("an iterable dataset's streams, round-robin") {
    auto it = std::make_shared<range_iterable>(23, true);
    data_loader loader(
        it,
        {.batch_size = 3, .num_workers = 2, .timeout = kHeal, .multiprocessing_context = "fork"});
    CHECK(epoch_labels(loader) == round_robin(23, 2, true, 3, false));
  }
}

TEST_CASE("each worker process loads in a process of its own, with its worker_init_fn there",
          "[actors][loader][process]") {
  auto ds = std::make_shared<pid_dataset>();
  data_loader loader(ds, {.batch_size = 2,
                          .num_workers = 2,
                          .pin_memory = true,
                          .timeout = kHeal,
                          .worker_init_fn =
                              [](int64_t id) {
                                // In the child: the parent's environment is not touched.
                                ::setenv("ACTORCH_TEST_WORKER", std::to_string(id).c_str(), 1);
                                const worker_info* w = get_worker_info();
                                ACTORCH_CHECK(w && w->id == id && w->num_workers == 2,
                                              "worker_init_fn without its worker info");
                              },
                          .multiprocessing_context = "fork"});
  std::set<int64_t> pids;
  std::vector<int64_t> labels;
  for (const auto& b : loader) {
    for (int64_t p : ints_of(b[2].as_tensor()))
      pids.insert(p);
    for (int64_t i : ints_of(b[1].as_tensor()))
      labels.push_back(i);
  }
  CHECK(loader.pool_stats().allocations > 0); // copied out of the children into the pool
  CHECK(labels == ints_of(arange(16)));
  CHECK(pids.size() == 2);
  CHECK_FALSE(pids.count(::getpid()));
  CHECK(std::getenv("ACTORCH_TEST_WORKER") == nullptr);
}

TEST_CASE("a worker process that crashes is replaced and the epoch goes on",
          "[actors][loader][process]") {
  for (const int sig : {SIGABRT, SIGSEGV}) {
    INFO("signal " << sig);
    const std::string marker = "crash_once_" + std::to_string(sig);
    forget(marker);
    auto ds = std::make_shared<probe_dataset>(24);
    ds->hook = [marker, sig](int64_t i) {
      if (i == 9 && first_time(marker))
        std::raise(sig); // in the child: the program lives on
    };
    data_loader loader(
        ds,
        {.batch_size = 4, .num_workers = 2, .timeout = kHeal, .multiprocessing_context = "fork"});
    const auto got = epoch_labels(loader);
    REQUIRE(got.size() == 6);
    CHECK(flat(got) == ints_of(arange(24)));
    CHECK(epoch_labels(loader).size() == 6); // and the next epoch runs on the replacement
  }
}

TEST_CASE("a batch whose load always crashes fails the epoch, naming the worker, batch and signal",
          "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(24);
  ds->hook = [](int64_t i) {
    if (i == 9)
      std::abort();
  };
  data_loader loader(
      ds, {.batch_size = 4, .num_workers = 2, .timeout = kHeal, .multiprocessing_context = "fork"});
  const epoch_failure f = run_until_error(loader);
  CHECK(f.batches == 2);
  CHECK_THAT(f.message, Contains("died 3 times while loading batch 2 (sample indices [8, 9, 10, "
                                 "11]); last exit reason: DataLoader worker") &&
                            Contains("was killed by signal 6 (Aborted) while loading batch 2"));
}

TEST_CASE("a worker process past its timeout is killed and replaced", "[actors][loader][process]") {
  forget("hang_once");
  auto ds = std::make_shared<probe_dataset>(16);
  ds->hook = [](int64_t i) {
    if (i == 5 && first_time("hang_once"))
      sleep_ms(60'000); // a get() that hangs, once
  };
  const auto t0 = clock_type::now();
  {
    data_loader loader(
        ds, {.batch_size = 2, .num_workers = 2, .timeout = 0.5, .multiprocessing_context = "fork"});
    CHECK(flat(epoch_labels(loader)) == ints_of(arange(16)));
  }
  CHECK(seconds_since(t0) < 10);

  SECTION("every time: the epoch's error names the batch and the deadline") {
    ds->hook = [](int64_t i) {
      if (i == 5)
        sleep_ms(60'000);
    };
    data_loader loader(
        ds, {.batch_size = 2, .num_workers = 2, .timeout = 0.3, .multiprocessing_context = "fork"});
    const epoch_failure f = run_until_error(loader);
    CHECK_THAT(f.message,
               Contains("died 3 times while loading batch 2 (sample indices [4, 5])") &&
                   Contains("did not finish within the timeout of 0.3 seconds and was killed"));
  }
}

TEST_CASE("a dataset exception in a worker process is the error a worker thread gives",
          "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(12);
  ds->hook = [](int64_t i) {
    if (i == 7)
      throw std::runtime_error("no such image");
  };
  data_loader loader(
      ds, {.batch_size = 2, .num_workers = 2, .timeout = kHeal, .multiprocessing_context = "fork"});
  CHECK_THAT(run_until_error(loader).message,
             Contains("DataLoader worker ") &&
                 Contains(" failed on sample index 7 (batch 3): no such image"));
}

TEST_CASE("worker processes end with their loader, mid-epoch or not", "[actors][loader][process]") {
  const std::set<pid_t> before = child_processes();
  auto ds = std::make_shared<probe_dataset>(64);
  ds->hook = [](int64_t) { sleep_ms(1); };
  for (const bool persistent : {false, true}) {
    data_loader loader(ds, {.batch_size = 2,
                            .num_workers = 3,
                            .timeout = kHeal,
                            .multiprocessing_context = "fork",
                            .persistent_workers = persistent});
    int n = 0;
    for (const auto& b : loader) {
      (void)b;
      if (++n == 3)
        break;
    }
    CHECK(child_processes().size() > before.size());
  }
  // The loaders are gone: so are their children (killed and reaped, no zombie left).
  const auto t0 = clock_type::now();
  while (child_processes() != before && seconds_since(t0) < 5)
    sleep_ms(10);
  CHECK(child_processes() == before);
}

TEST_CASE("multiprocessing_context is checked as PyTorch checks it", "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(4);
  auto error_of = [&](loader_options o) {
    try {
      data_loader loader(ds, o);
    } catch (const actorch::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of({.multiprocessing_context = "fork"}),
             Contains("multiprocessing_context can only be used with multi-process loading "
                      "(num_workers > 0), but got num_workers=0"));
  CHECK_THAT(error_of({.num_workers = 2, .multiprocessing_context = "spawn"}),
             Contains("multiprocessing_context 'spawn' is not supported"));
}
