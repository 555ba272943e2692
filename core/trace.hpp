// Chrome / Perfetto trace recording (`--trace FILE`): spans on named lanes, one lane per actor
// ("sampler", "worker 1", "trainer 0", "comm"), so a user sees each batch move through the
// pipeline and each gradient bucket go from ready to reduced. Off by default: a disabled
// record costs one relaxed atomic load. Open the file in ui.perfetto.dev or chrome://tracing.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace actorch::trace {

using clock = std::chrono::steady_clock;

/// Starts (or stops) recording in this process.
void enable(bool on = true);
bool enabled();

/// One complete event ("ph":"X") from `begin` to `end` on `lane`. `args` is a JSON object's
/// body without braces (`"seq": 3, "bytes": 1024`), or empty. Thread-safe.
void record(const std::string& lane, const std::string& name, clock::time_point begin,
            clock::time_point end, const std::string& args = {});

/// Records [construction, destruction) on `lane` when tracing is enabled.
class span {
public:
  span(std::string lane, std::string name, std::string args = {});
  ~span();
  span(const span&) = delete;
  span& operator=(const span&) = delete;

private:
  bool on_;
  std::string lane_, name_, args_;
  clock::time_point begin_;
};

/// Writes what was recorded as a Chrome trace (JSON object with "traceEvents"), with `pid` as
/// the process id (the rank) and `process_name` as its label; atomically (tmp, fsync, rename).
void write_chrome_json(const std::string& path, int pid, const std::string& process_name);

/// Merges Chrome traces written by write_chrome_json into one file (atomically).
void merge_chrome_json(const std::vector<std::string>& parts, const std::string& path);

/// Drops what was recorded.
void clear();

} // namespace actorch::trace
