// A program whose dataset's get(3) never returns (Note [Stuck workers] in actors/data_loader.cpp):
// a loader with a timeout gets its error to the caller's catch on time; one without a timeout is
// left by a break and destroyed after the shutdown's grace; and main returns while both stuck
// threads still sleep, which the process must not wait for. Exits 0 when every step kept its
// time; its test (tests/tools/CMakeLists.txt) also checks that the process ended at all and that
// stderr says what was abandoned.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "actors/data_loader.hpp"
#include "core/ops/factory.hpp"

using namespace actorch;
using clock_type = std::chrono::steady_clock;

namespace {

std::atomic<int> stuck{0}; // get(3) calls in progress

class stuck_dataset : public data::dataset {
public:
  int64_t size() const override { return 8; }
  data::sample get(int64_t index) const override {
    if (index == 3) {
      stuck.fetch_add(1);
      for (;;)
        std::this_thread::sleep_for(std::chrono::hours(1)); // never returns
    }
    return data::sample::make_tuple({full({2}, double(index)), index});
  }
};

/// "rss_kb=N threads=T" of this process (/proc/self/status): what abandoned workers keep.
std::string footprint() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr)
    return "rss_kb=? threads=?";
  char line[256], value[256];
  std::string rss = "?", threads = "?";
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmRSS: %255s", value) == 1)
      rss = value;
    else if (std::sscanf(line, "Threads: %255s", value) == 1)
      threads = value;
  }
  std::fclose(f);
  return "rss_kb=" + rss + " threads=" + threads;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

int main() {
  auto ds = std::make_shared<stuck_dataset>();
  int failures = 0;
  std::printf("before any loader: %s\n", footprint().c_str());

  auto t0 = clock_type::now();
  try {
    data::data_loader loader(ds, {.batch_size = 1, .num_workers = 2, .timeout = 1.0});
    for (const auto& b : loader)
      (void)b;
    std::printf("FAIL: the epoch ended without the timeout error\n");
    ++failures;
  } catch (const actorch::error& e) {
    const double t = seconds_since(t0);
    std::printf("timeout: caught after %.2f s: %s\n", t, e.what());
    if (t > 3.0) {
      std::printf("FAIL: the error reached the catch after %.2f s, not about 1 s\n", t);
      ++failures;
    }
  }

  std::printf("one loader abandoned: %s\n", footprint().c_str());
  t0 = clock_type::now();
  {
    data::data_loader loader(ds, {.batch_size = 1, .num_workers = 2});
    for (const auto& b : loader) {
      (void)b;
      while (stuck.load() < 2) // the second loader's worker is inside get(3) too
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      break;
    }
  }
  const double left = seconds_since(t0);
  std::printf("no timeout: left the loader after %.2f s\n", left);
  std::printf("two loaders abandoned: %s\n", footprint().c_str());
  if (left > 8.0) {
    std::printf("FAIL: leaving the loader took %.2f s, more than the 5 s grace\n", left);
    ++failures;
  }
  std::printf("%s; main returns with %d threads inside get(3)\n", failures ? "FAILED" : "passed",
              stuck.load());
  std::fflush(stdout);
  return failures ? 1 : 0;
}
