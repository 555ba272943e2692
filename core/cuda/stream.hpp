// torch.cuda's streams, events and device selection: a stream orders work on one GPU, an event
// marks a point in a stream that another stream or the host can wait for. Kernels launch on the
// current stream of the current device, both per thread (kernels/cuda/context.hpp), as in
// PyTorch; the default current stream is the legacy default stream. Without CUDA (in the build
// or the machine) is_available() is false and everything else throws, saying why.
#pragma once

#include <memory>
#include <string>

namespace actorch::cuda {

/// torch.cuda.is_available: built with CUDA, a driver, and at least one GPU.
bool is_available();
/// torch.cuda.device_count (0 where is_available() is false).
int device_count();
/// torch.cuda.current_device / set_device.
int current_device();
void set_device(int device);
/// The GPU's UUID as 32 hex digits (torch.cuda.get_device_properties(device).uuid): unique
/// across hosts, so ranks can tell whether two of them hold one GPU.
std::string device_uuid(int device);

/// A CUDA stream on one device (torch.cuda.Stream). Copies share the stream; a stream made by
/// create() is destroyed with its last copy, after the work queued on it is done.
class stream {
public:
  /// A new stream on `device` (-1: the current device) that does not synchronise with the
  /// legacy default stream (cudaStreamNonBlocking, as PyTorch's pool streams).
  static stream create(int device = -1);
  /// The legacy default stream of `device`.
  static stream default_stream(int device = -1);
  /// A stream made elsewhere (torch's current stream, for one), not owned: its maker keeps it
  /// alive while this is used. nullptr is the legacy default stream.
  static stream borrowed(int device, void* handle);

  int device() const { return device_; }
  /// The cudaStream_t (nullptr for the legacy default stream).
  void* handle() const { return handle_ ? handle_.get() : nullptr; }
  /// A share in the cudaStream_t: a stream made by create() is not destroyed while it is held
  /// (empty for the legacy default stream).
  std::shared_ptr<void> lifetime() const { return handle_; }
  /// Blocks the host until every task queued on the stream has run.
  void synchronize() const;
  /// Whether every task queued on the stream has run.
  bool query() const;
  /// Makes future work on this stream wait for everything queued on `other` so far.
  void wait_stream(const stream& other) const;

  friend bool operator==(const stream& a, const stream& b) {
    return a.device_ == b.device_ && a.handle() == b.handle();
  }

private:
  stream(int device, std::shared_ptr<void> handle) : device_(device), handle_(std::move(handle)) {}
  friend stream current_stream(int device);
  int device_ = 0;
  std::shared_ptr<void> handle_;
};

/// This thread's current stream on `device` (-1: the current device).
stream current_stream(int device = -1);
/// Makes `s` this thread's current stream on its device (torch.cuda.set_stream). The stream
/// must outlive its time as current stream.
void set_stream(const stream& s);
/// torch.cuda.synchronize: blocks until every stream of `device` (-1: current) is idle.
void synchronize(int device = -1);

/// An event on a stream (torch.cuda.Event).
class event {
public:
  /// enable_timing: elapsed_time() works (costs a timestamp per record, so off by default).
  explicit event(bool enable_timing = false);
  /// Records the event on `s` (the current stream of the current device by default): it
  /// completes once everything queued on `s` before it has run.
  void record();
  void record(const stream& s);
  /// Makes future work on `s` wait for the event's completion (the host does not wait).
  void wait(const stream& s) const;
  /// Blocks the host until the event completes.
  void synchronize() const;
  bool query() const;
  /// Milliseconds from this event to `end`; both recorded with enable_timing and completed.
  float elapsed_time(const event& end) const;

private:
  std::shared_ptr<void> handle_; // cudaEvent_t, created on the first record
  bool timing_;
  int device_ = -1;
};

/// Makes `device` current for a scope and restores the previous device after
/// (torch.cuda.device). Does nothing for a negative device.
class device_guard {
public:
  explicit device_guard(int device);
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

private:
  int previous_ = -1;
};

/// Makes `s` (and its device) current for a scope, as `with torch.cuda.stream(s):` does.
class stream_guard {
public:
  explicit stream_guard(const stream& s);
  ~stream_guard();
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

private:
  device_guard device_;
  void* previous_stream_;
  int stream_device_;
};

} // namespace actorch::cuda
