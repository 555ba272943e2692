// Worker threads that sit in one sample too long, named while they go on (issue 44's hangs that
// name themselves, for the loader): a thread loading a batch marks each sample it enters
// (load_sample does, in a slot of its own that the batch's scope sets: Note [Sample marks]), and a
// watcher thread of the loader prints, once per sample, "DataLoader worker 1 has been in sample
// index 17 (batch 3) for 10.0 s" on stderr once report_delay has passed, before any `timeout` ends
// the load. Worker processes report from their parent instead (worker_process.cpp), with their
// stacks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace actorch::actors {

class slow_samples {
public:
  /// Reports samples entered more than `delay_s` (> 0) seconds ago.
  explicit slow_samples(double delay_s);
  ~slow_samples();
  slow_samples(const slow_samples&) = delete;
  slow_samples& operator=(const slow_samples&) = delete;

  // A watched thread's mark (Note [Sample marks]): which sample it is in and since when, written
  // by that thread alone under a sequence count, read by the watcher.
  struct slot {
    const std::string* who = nullptr;
    std::atomic<uint64_t> version{0}; // odd while the thread writes the fields
    std::atomic<int64_t> index{0}, seq{0};
    std::atomic<int64_t> since_ns{0}; // steady clock; 0: in no sample
    uint64_t reported = 0;            // the watcher's: the version it last reported
    void mark(int64_t i, int64_t s, int64_t t);
  };

  /// For the life of the object, load_sample's samples on this thread are watched under `who`.
  class batch_scope {
  public:
    batch_scope(slow_samples* watch, const std::string& who);
    ~batch_scope();
    batch_scope(const batch_scope&) = delete;
    batch_scope& operator=(const batch_scope&) = delete;

  private:
    slow_samples* watch_;
    slot slot_;
    slot* previous_;
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
    slot* slot_;
  };

private:
  void run();

  const std::chrono::duration<double> delay_;
  std::mutex mu_; // slots_ and stop_
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<slot*> slots_; // the watched threads' marks
  std::thread watcher_;
};

} // namespace actorch::actors
