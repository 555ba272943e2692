// The trace recorder (trace.hpp). The threads that record (dataset workers, the sampler's
// host, trainers, the comm actor, Gloo's threads) push events into a moodycamel
// ConcurrentQueue: lock-free for many producers, so tracing never makes them wait on one
// another in their hot paths (it had them queue on one mutex per event); the order between
// threads does not matter, events carry their times. Writing drains the queue into `events`.
// Lanes become Chrome "threads", numbered in order of first appearance.
#include "core/trace.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>

#include <concurrentqueue/concurrentqueue.h>

#include "core/serialize/atomic_write.hpp"
#include "core/serialize/file_io.hpp"
#include "core/serialize/json.hpp"

namespace actorch::trace {

namespace {

struct event {
  std::string lane;
  std::string name;
  int64_t begin_ns;
  int64_t end_ns;
  std::string args;
};

struct recorder {
  std::atomic<bool> on{false};
  moodycamel::ConcurrentQueue<event> incoming;
  std::mutex mu;             // writers and clear()
  std::vector<event> events; // drained from `incoming`

  /// Moves what was recorded so far into `events`. Holds mu.
  void drain() {
    event e;
    while (incoming.try_dequeue(e))
      events.push_back(std::move(e));
  }
};

recorder& rec() {
  static recorder r;
  return r;
}

// steady_clock is CLOCK_MONOTONIC, shared by the processes of one host, so the ranks' traces
// line up when merged.
int64_t ns(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string us(int64_t nanos) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(nanos / 1000),
                static_cast<long long>(nanos % 1000));
  return buf;
}

} // namespace

void enable(bool on) {
  rec().on.store(on, std::memory_order_relaxed);
}

bool enabled() {
  return rec().on.load(std::memory_order_relaxed);
}

void record(const std::string& lane, const std::string& name, clock::time_point begin,
            clock::time_point end, const std::string& args) {
  if (!enabled())
    return;
  rec().incoming.enqueue({lane, name, ns(begin), ns(end), args});
}

span::span(std::string lane, std::string name, std::string args)
    : on_(enabled()), lane_(std::move(lane)), name_(std::move(name)), args_(std::move(args)),
      begin_(on_ ? clock::now() : clock::time_point{}) {}

span::~span() {
  if (on_)
    record(lane_, name_, begin_, clock::now(), args_);
}

void write_chrome_json(const std::string& path, int pid, const std::string& process_name) {
  recorder& r = rec();
  std::string out = "{\"traceEvents\":[\n";
  const std::string p = std::to_string(pid);
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + p + ",\"tid\":0,\"args\":{\"name\":";
  serialize::append_json_string(out, process_name);
  out += "}}";
  std::lock_guard lock(r.mu);
  r.drain();
  std::map<std::string, int> lanes;
  for (const event& e : r.events) {
    auto [it, inserted] = lanes.try_emplace(e.lane, int(lanes.size()) + 1);
    if (!inserted)
      continue;
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + p +
           ",\"tid\":" + std::to_string(it->second) + ",\"args\":{\"name\":";
    serialize::append_json_string(out, e.lane);
    out += "}}";
  }
  for (const event& e : r.events) {
    out += ",\n{\"ph\":\"X\",\"pid\":" + p + ",\"tid\":" + std::to_string(lanes.at(e.lane)) +
           ",\"name\":";
    serialize::append_json_string(out, e.name);
    out += ",\"ts\":" + us(e.begin_ns) + ",\"dur\":" + us(e.end_ns - e.begin_ns);
    if (!e.args.empty())
      out += ",\"args\":{" + e.args + "}";
    out += "}";
  }
  out += "\n]}\n";
  write_file_atomically(path, out, "trace");
}

void merge_chrome_json(const std::vector<std::string>& parts, const std::string& path) {
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& part : parts) {
    std::FILE* f = std::fopen(part.c_str(), "rb");
    ACTORCH_CHECK(f != nullptr, "trace: cannot open ", part, ": ", errno_str(errno));
    std::string text;
    char buf[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
      text.append(buf, n);
    std::fclose(f);
    const size_t open = text.find('[');
    const size_t close = text.rfind(']');
    ACTORCH_CHECK(open != std::string::npos && close != std::string::npos && open < close,
                  "trace: ", part, " is not a trace written by actorch (no traceEvents array)");
    std::string body = text.substr(open + 1, close - open - 1);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' '))
      body.pop_back();
    if (body.empty())
      continue;
    out += first ? "" : ",";
    out += body;
    first = false;
  }
  out += "\n]}\n";
  write_file_atomically(path, out, "trace");
}

void clear() {
  recorder& r = rec();
  std::lock_guard lock(r.mu);
  r.drain();
  r.events.clear();
}

} // namespace actorch::trace
