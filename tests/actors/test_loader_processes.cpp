// Dataset workers in forked processes (multiprocessing_context = "fork"; Note [Worker processes]
// in actors/loader/worker_process.cpp): the same batches as worker threads, and a crash, a hang,
// an exception or a forged reply in the dataset's code that the program survives.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "actors/loader/worker_process.hpp"
#include "tests/actors/loader_fixtures.hpp"
#include "tests/core/files.hpp"
#include "tests/core/memory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::test;
using Catch::Contains;
using Catch::StartsWith;
using clock_type = std::chrono::steady_clock;

namespace {

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

/// What a loader run in a limited process (in_limited_process) ended with.
struct limited_run {
  std::string message;      // the epoch's error, or how the process ended
  uint64_t peak_growth = 0; // how far its peak resident memory grew over the run, in bytes
};

/// Runs `body` (which returns an epoch's error) in a forked copy of this process whose data
/// may grow by at most 1 GiB (RLIMIT_DATA): a memory attack the code under test falls for fails
/// an allocation there instead of taking the machine down.
limited_run in_limited_process(const std::function<std::string()>& body) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(out[0]);
    std::string text;
    try {
      const uint64_t limit = status_bytes("VmData") + (uint64_t(1) << 30);
      const rlimit r{limit, limit};
      ACTORCH_CHECK(::setrlimit(RLIMIT_DATA, &r) == 0, "setrlimit: ", errno_str(errno));
      const uint64_t peak = status_bytes("VmHWM");
      const std::string message = body();
      text = std::to_string(status_bytes("VmHWM") - peak) + "\n" + message;
    } catch (const std::exception& e) {
      text = "0\nthe test's process failed: " + std::string(e.what());
    }
    (void)!::write(out[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  const auto t0 = clock_type::now();
  for (char buf[4096];;) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) == 0 && seconds_since(t0) < 120)
      continue;
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0)
      break;
    text.append(buf, size_t(n));
  }
  ::close(out[0]);
  ::kill(pid, SIGKILL); // if it hung past the poll's patience; it has ended otherwise
  int status = 0;
  ::waitpid(pid, &status, 0);
  const size_t eol = text.find('\n');
  if (eol == std::string::npos)
    return {"the test's process ended without an answer (wait status " + std::to_string(status) +
            ")"};
  return {text.substr(eol + 1), std::stoull(text.substr(0, eol))};
}

/// The files open in this process, as (device, inode): descriptors' numbers are reused.
std::set<std::pair<dev_t, ino_t>> open_files() {
  std::set<std::pair<dev_t, ino_t>> out;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    struct stat st {};
    if (::stat(fd.path().c_str(), &st) == 0)
      out.emplace(st.st_dev, st.st_ino);
  }
  return out;
}

/// A dataset whose get(), in the worker's child process, writes `frame` on the child's socket
/// to the loader, as the loader's own reply would start, and then hangs (the child is killed).
/// The socket is the one opened since the dataset was made; with `shared_bytes`, the shared
/// batch file (a memfd named after the worker) is first grown to that size, unwritten.
class forging_dataset : public data::dataset {
public:
  forging_dataset(std::string frame, uint64_t shared_bytes)
      : frame_(std::move(frame)), shared_bytes_(shared_bytes), before_(open_files()) {}
  int64_t size() const override { return 4; }
  data::sample get(int64_t) const override {
    std::vector<int> sockets;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::stoi(entry.path().filename().string());
      struct stat st {};
      if (::fstat(fd, &st) != 0 || before_.count({st.st_dev, st.st_ino}))
        continue;
      char link[256] = {};
      if (S_ISSOCK(st.st_mode))
        sockets.push_back(fd);
      else if (shared_bytes_ > 0 && ::readlink(entry.path().c_str(), link, sizeof link - 1) > 0 &&
               std::string_view(link).starts_with("/memfd:actorch "))
        (void)!::ftruncate(fd, off_t(shared_bytes_));
    }
    // After the file is grown: the frame's arrival starts the loader's checks. A socket of a
    // worker gone before has no reader: no harm.
    for (const int fd : sockets)
      (void)!::send(fd, frame_.data(), frame_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    sleep_ms(60'000);
    return {};
  }

private:
  std::string frame_;
  uint64_t shared_bytes_;
  std::set<std::pair<dev_t, ino_t>> before_;
};

/// Bytes of a frame, as worker_process.cpp lays them out (host order).
struct frame_bytes {
  template <class T> frame_bytes& put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  /// The frame with its length in front.
  std::string framed() const { return frame_bytes().put<uint64_t>(out.size()).out + out; }
  std::string out;
};

/// A reply's head: lease, run id, batch, end_of_data, collated, no error.
frame_bytes reply_head() {
  return frame_bytes()
      .put<uint64_t>(1)
      .put<uint64_t>(0)
      .put<int64_t>(0)
      .put<uint8_t>(0)
      .put<uint8_t>(1)
      .put<uint64_t>(0);
}

/// Sample i: (tensor [2] = {i, i}, label i, the pid of the process that loaded it).
class pid_dataset : public dataset {
public:
  int64_t size() const override { return 16; }
  sample get(int64_t i) const override {
    return sample::make_tuple({full({2}, double(i)), i, int64_t(::getpid())});
  }
};

/// A keyed_dataset (Note [Sampler keys]): indices 0..3 are samples "i<index>"; from 4 up, the
/// names the test gives them, which a worker process's copy learns from its tasks only.
class named_dataset : public keyed_dataset {
public:
  int64_t size() const override { return 4; }
  sample get(int64_t i) const override {
    std::lock_guard lock(mutex_);
    if (i < size())
      return "i" + std::to_string(i);
    const auto it = names_.find(i);
    ACTORCH_CHECK(it != names_.end(), "no name for index ", i);
    return it->second;
  }
  std::string keys_of(const std::vector<int64_t>& indices) const override {
    std::lock_guard lock(mutex_);
    std::string out;
    for (int64_t i : indices)
      if (i >= size())
        out += std::to_string(i) + "=" + names_.at(i) + ";";
    return out;
  }
  void learn_keys(std::string_view encoded) const override {
    std::lock_guard lock(mutex_);
    names_.clear();
    for (size_t at = 0; at < encoded.size();) {
      const size_t eq = encoded.find('=', at), end = encoded.find(';', eq);
      names_[std::stoll(std::string(encoded.substr(at, eq - at)))] =
          std::string(encoded.substr(eq + 1, end - eq - 1));
      at = end + 1;
    }
    ++learned_;
  }
  std::string index_name(int64_t i) const override {
    std::lock_guard lock(mutex_);
    return i < size() ? "index " + std::to_string(i) : "key '" + names_.at(i) + "'";
  }
  void name(int64_t i, std::string n) {
    std::lock_guard lock(mutex_);
    names_[i] = std::move(n);
  }
  int learned() const {
    std::lock_guard lock(mutex_);
    return learned_;
  }

private:
  mutable std::mutex mutex_;
  mutable std::map<int64_t, std::string> names_;
  mutable int learned_ = 0;
};

/// A dataset that fetches batches (Note [Batched fetch]): get_many gives 10 x each index but for
/// multiples of 3, which it drops; get() alone gives the index.
class batched_dataset : public dataset {
public:
  int64_t size() const override { return 10; }
  sample get(int64_t i) const override { return i; }
  bool fetches_batches() const override { return true; }
  std::vector<sample> get_many(const std::vector<int64_t>& indices) const override {
    ++calls;
    std::vector<sample> out;
    for (int64_t i : indices)
      if (i % 3 != 0)
        out.emplace_back(10 * i);
    return out;
  }
  mutable std::atomic<int> calls{0}; // in this process
};

/// An epoch of a loader of strings, the batches one after another.
std::vector<std::string> epoch_strings(data_loader& loader) {
  std::vector<std::string> out;
  for (const auto& b : loader)
    for (const auto& s : b.as_tuple())
      out.push_back(s.as_string());
  return out;
}

} // namespace

TEST_CASE("a keyed dataset's keys reach its copies in worker processes with each task",
          "[actors][loader][process]") {
  // Indices 4 and up are keys the sampler yields; the names change between epochs, after the
  // persistent children were forked, so each must learn them from its tasks.
  auto ds = std::make_shared<named_dataset>();
  ds->name(5, "dog.jpg");
  for (const std::string context : {"", "fork"}) {
    INFO("multiprocessing_context '" << context << "'");
    ds->name(4, "cat.jpg");
    data_loader loader(
        ds, {.batch_size = 2,
             .sampler = std::make_shared<list_sampler>(std::vector<int64_t>{4, 1, 5, 4, 0, 5}),
             .num_workers = 2,
             .timeout = kHeal,
             .retry_timeouts = true,
             .multiprocessing_context = context,
             .persistent_workers = true});
    CHECK(epoch_strings(loader) ==
          std::vector<std::string>{"cat.jpg", "i1", "dog.jpg", "cat.jpg", "i0", "dog.jpg"});
    ds->name(4, "emu.jpg");
    CHECK(epoch_strings(loader) ==
          std::vector<std::string>{"emu.jpg", "i1", "dog.jpg", "emu.jpg", "i0", "dog.jpg"});
  }
  CHECK(ds->learned() == 0); // the children learned, not the parent's copy
  SECTION("a key that cannot be encoded is a batch error naming the worker and batch") {
    ds->name(6, "a");
    data_loader loader(ds, {.batch_size = 1,
                            .sampler = std::make_shared<list_sampler>(std::vector<int64_t>{7}),
                            .num_workers = 1,
                            .timeout = kHeal,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork"});
    CHECK_THROWS_WITH(epoch_strings(loader),
                      Contains("DataLoader worker 0 cannot hand batch 0 to its process: ") &&
                          Contains("map::at"));
  }
}

TEST_CASE("a dataset that fetches batches is asked once per batch, and its batch is what it "
          "returns",
          "[actors][loader][process]") {
  auto ds = std::make_shared<batched_dataset>();
  for (const auto& [workers, context] :
       {std::pair<int64_t, std::string>{0, ""}, {2, ""}, {2, "fork"}}) {
    INFO(workers << " workers, multiprocessing_context '" << context << "'");
    ds->calls = 0;
    data_loader loader(ds, {.batch_size = 4,
                            .num_workers = workers,
                            .timeout = kHeal,
                            .retry_timeouts = true,
                            .multiprocessing_context = context});
    std::vector<std::vector<int64_t>> batches;
    for (const auto& b : loader)
      batches.push_back(ints_of(b.as_tensor()));
    CHECK(batches == std::vector<std::vector<int64_t>>{{10, 20}, {40, 50, 70}, {80}});
    CHECK(ds->calls == (context.empty() ? 3 : 0)); // in the children, with "fork"
  }
  SECTION("unbatched (batch_size none), get() each, as torch's __getitem__") {
    data_loader loader(ds, {.batch_size = std::nullopt, .num_workers = 2});
    std::vector<int64_t> samples;
    for (const auto& b : loader)
      samples.push_back(ints_of(b.as_tensor())[0]);
    CHECK(samples == ints_of(arange(10)));
  }
}

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
                              .retry_timeouts = true,
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
    data_loader loader(it, {.batch_size = 3,
                            .num_workers = 2,
                            .timeout = kHeal,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork"});
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
                          .retry_timeouts = true,
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
    data_loader loader(ds, {.batch_size = 4,
                            .num_workers = 2,
                            .timeout = kHeal,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork"});
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
  data_loader loader(ds, {.batch_size = 4,
                          .num_workers = 2,
                          .timeout = kHeal,
                          .retry_timeouts = true,
                          .multiprocessing_context = "fork"});
  const epoch_failure f = run_until_error(loader);
  CHECK(f.batches == 2);
  CHECK_THAT(f.message, Contains("died 3 times while loading batch 2 (sample indices [8, 9, 10, "
                                 "11]); last exit reason: DataLoader worker") &&
                            Contains("was killed by signal 6 (Aborted) while loading batch 2"));
}

TEST_CASE("a worker process past its timeout is killed: PyTorch's error, after the batches before",
          "[actors][loader][process]") {
  auto ds = std::make_shared<probe_dataset>(16);
  ds->hook = [](int64_t i) {
    if (i == 5)
      sleep_ms(60'000); // a get() that hangs
  };
  data_loader loader(
      ds, {.batch_size = 2, .num_workers = 2, .timeout = 0.5, .multiprocessing_context = "fork"});
  const epoch_failure f = run_until_error(loader);
  CHECK_THAT(f.message, StartsWith("DataLoader timed out after 0.5 seconds: DataLoader worker ") &&
                            Contains(" was still loading batch 2 (sample indices [4, 5]) and was "
                                     "killed"));
  CHECK(f.batches == 2); // batches 0 and 1 came first, as a dataset's exception lets them
  CHECK_THAT(f.message, !Contains("died"));
}

TEST_CASE("with retry_timeouts a worker process past its timeout is replaced",
          "[actors][loader][process]") {
  forget("hang_once");
  auto ds = std::make_shared<probe_dataset>(16);
  ds->hook = [](int64_t i) {
    if (i == 5 && first_time("hang_once"))
      sleep_ms(60'000); // a get() that hangs, once
  };
  const auto t0 = clock_type::now();
  {
    data_loader loader(ds, {.batch_size = 2,
                            .num_workers = 2,
                            .timeout = 0.5,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork"});
    CHECK(flat(epoch_labels(loader)) == ints_of(arange(16)));
  }
  CHECK(seconds_since(t0) < 10);

  SECTION("every time: the epoch's error names the batch and the deadline") {
    ds->hook = [](int64_t i) {
      if (i == 5)
        sleep_ms(60'000);
    };
    data_loader loader(ds, {.batch_size = 2,
                            .num_workers = 2,
                            .timeout = 0.3,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork"});
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
  data_loader loader(ds, {.batch_size = 2,
                          .num_workers = 2,
                          .timeout = kHeal,
                          .retry_timeouts = true,
                          .multiprocessing_context = "fork"});
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
                            .retry_timeouts = true,
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

TEST_CASE("end_epoch stops the epoch's worker processes, and only while that epoch runs",
          "[actors][loader][process]") {
  const std::set<pid_t> before = child_processes();
  auto ds = std::make_shared<probe_dataset>(24);
  for (const bool persistent : {false, true}) {
    data_loader loader(ds, {.batch_size = 2,
                            .num_workers = 2,
                            .timeout = kHeal,
                            .retry_timeouts = true,
                            .multiprocessing_context = "fork",
                            .persistent_workers = persistent});
    auto it = loader.begin();
    CHECK(ints_of((*it)[1].as_tensor()) == std::vector<int64_t>{0, 1});
    const int64_t epoch = loader.epoch();
    CHECK(child_processes().size() > before.size());
    loader.end_epoch(epoch);
    CHECK(loader.epoch() == epoch + 1);
    const auto t0 = clock_type::now();
    while (child_processes() != before && seconds_since(t0) < 5)
      sleep_ms(10);
    // torch's iterator, dropped, shuts its workers down; persistent ones wait for the next epoch
    CHECK((child_processes() == before) == !persistent);
    // A stale epoch's end_epoch leaves the one running alone.
    int64_t batches = 0;
    for (auto b = loader.begin(); !(b == loader.end()); ++b) {
      loader.end_epoch(epoch);
      ++batches;
    }
    CHECK(batches == 12);
  }
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

TEST_CASE("a spawned worker whose program cannot start fails the batch naming it, after its "
          "replacements",
          "[actors][loader][process]") {
  // See Note [Spawned workers]: the child execs the program; here there is none.
  loader_options o;
  o.batch_size = 2;
  o.num_workers = 1;
  o.multiprocessing_context = "spawn";
  o.spawn.argv = {"/nonexistent/actorch-worker-program"};
  data_loader loader(std::make_shared<probe_dataset>(4), o);
  CHECK_THROWS_WITH(
      [&] {
        for (const auto& b : loader)
          (void)b;
      }(),
      Contains("could not start its program (exec failed)") && Contains("batch 0"));
}

TEST_CASE("a worker process's reply is bounded before the loader allocates for it",
          "[actors][loader][process]") {
  // See Note [Worker processes] in actors/loader/worker_process.cpp. The dataset in the child
  // forges the start of a reply; each run is in a process of its own whose memory may grow by
  // 1 GiB at most, and its peak resident memory must not grow by even 32 MiB.
  using actorch::actors::worker_process;
  const uint64_t absurd = uint64_t(3) << 29; // 1.5 GiB
  auto run = [](std::string frame, uint64_t shared_bytes, double timeout) {
    return in_limited_process([&] {
      auto ds = std::make_shared<forging_dataset>(std::move(frame), shared_bytes);
      data_loader loader(ds, {.batch_size = 2,
                              .num_workers = 1,
                              .timeout = timeout,
                              .retry_timeouts = true,
                              .multiprocessing_context = "fork"});
      return run_until_error(loader).message;
    });
  };
  const std::string died_thrice = "DataLoader worker 0 died 3 times while loading batch 0 "
                                  "(sample indices [0, 1]); last exit reason: DataLoader worker "
                                  "0 (process ";
  limited_run r;
  SECTION("a length over the bound is refused as it is announced") {
    r = run(frame_bytes().put<uint64_t>(absurd).out, 0, kHeal);
    CHECK_THAT(r.message, Contains(died_thrice) &&
                              Contains(") announced a reply of 1610612736 bytes, more than the " +
                                       std::to_string(worker_process::max_frame_bytes) +
                                       " a reply may hold, and was killed while loading batch 0"));
  }
  SECTION("a length within the bound costs only the bytes that arrive") {
    r = run(frame_bytes().put<uint64_t>(worker_process::max_frame_bytes).out, 0, 1);
    CHECK_THAT(r.message, Contains(died_thrice) &&
                              Contains(") did not finish within the timeout of 1 seconds and was "
                                       "killed while loading batch 0"));
  }
  SECTION("a count of items is bounded by the bytes left in the frame") {
    const uint64_t items = uint64_t(1) << 40;
    r = run(reply_head()
                .put<uint8_t>(uint8_t(data::sample::kind::tuple))
                .put<uint64_t>(items)
                .put<uint64_t>(0) // the shared file's bytes used
                .framed(),
            0, kHeal);
    CHECK_THAT(r.message, Contains(died_thrice) &&
                              Contains(") sent a reply that cannot be taken (worker process: a "
                                       "frame announces 1099511627776 items with 0 bytes left"));
  }
  SECTION("a tensor must lie in pages of the shared file the child wrote") {
    r = run(reply_head()
                .put<uint8_t>(uint8_t(data::sample::kind::tensor))
                .put<uint8_t>(uint8_t(dtype::uint8))
                .put<uint64_t>(1)      // dims
                .put<int64_t>(absurd)  // its size
                .put<uint64_t>(0)      // its offset in the shared file
                .put<uint8_t>(1)       // lent (Note [Lent batches])
                .put<uint64_t>(absurd) // the shared file's bytes used
                .framed(),
            absurd, kHeal);
    CHECK_THAT(r.message,
               Contains(died_thrice) &&
                   Contains(") sent a reply that cannot be taken (the shared batch file has 0 "
                            "bytes written, fewer than the 1610612736 the reply says it used"));
  }
  CHECK(r.peak_growth < (uint64_t(32) << 20));
}
