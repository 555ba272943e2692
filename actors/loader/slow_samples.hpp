// Worker threads that sit in one sample too long, named while they go on (issue 44's hangs that
// name themselves, for the loader): a thread loading a batch marks each sample it enters
// (load_sample does, through a thread-local set for the batch), and a watcher thread of the
// loader prints, once per sample, "DataLoader worker 1 has been in sample index 17 (batch 3)
// for 10.0 s" on stderr once report_delay has passed, before any `timeout` ends the load. Worker
// processes report from their parent instead (worker_process.cpp), with their stacks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace actorch::actors {

class slow_samples {
public:
  /// Reports samples entered more than `delay_s` (> 0) seconds ago.
  explicit slow_samples(double delay_s);
  ~slow_samples();
  slow_samples(const slow_samples&) = delete;
  slow_samples& operator=(const slow_samples&) = delete;

  /// For the life of the object, load_sample's samples on this thread are watched under `who`.
  class batch_scope {
  public:
    batch_scope(slow_samples* watch, const std::string& who);
    ~batch_scope();
    batch_scope(const batch_scope&) = delete;
    batch_scope& operator=(const batch_scope&) = delete;

  private:
    slow_samples* previous_;
    const std::string* previous_who_;
  };

  /// load_sample's mark: this thread is in sample `index` of batch `seq` until it goes (a no-op
  /// on a thread no batch_scope watches).
  class sample_scope {
  public:
    sample_scope(int64_t index, int64_t seq);
    ~sample_scope();
    sample_scope(const sample_scope&) = delete;
    sample_scope& operator=(const sample_scope&) = delete;

  private:
    slow_samples* watch_;
    uint64_t id_ = 0;
  };

private:
  struct entry {
    std::string who;
    int64_t index, seq;
    std::chrono::steady_clock::time_point since;
    bool reported = false;
  };
  uint64_t enter(const std::string& who, int64_t index, int64_t seq);
  void leave(uint64_t id);
  void run();

  const std::chrono::duration<double> delay_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, entry> in_;
  std::thread watcher_;
};

} // namespace actorch::actors
