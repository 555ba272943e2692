// Streams, events and device guards over the CUDA runtime; see stream.hpp.
#include "core/cuda/stream.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "core/cuda_memory.hpp"
#include "kernels/cuda/context.hpp"

#if ACTORCH_HAVE_CUDA
#include "kernels/cuda/check.hpp"
#endif

namespace actorch::cuda {

#if ACTORCH_HAVE_CUDA

namespace {

// `device`, or the current device for -1; throws naming `who` when it cannot be used.
int resolve(int device, const char* who) {
  const std::string problem = cuda_device_problem(device < 0 ? 0 : device);
  ACTORCH_CHECK(problem.empty(), who, ": ", problem);
  return device < 0 ? kernels::cuda::current_device() : device;
}

cudaStream_t raw(const stream& s) {
  return static_cast<cudaStream_t>(s.handle());
}

} // namespace

bool is_available() {
  return cuda_device_count() > 0;
}

int device_count() {
  return cuda_device_count();
}

int current_device() {
  return resolve(-1, "current_device");
}

void set_device(int device) {
  kernels::cuda::set_device(resolve(device, "set_device"));
}

std::string device_uuid(int device) {
  cudaDeviceProp prop{};
  ACTORCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, resolve(device, "device_uuid")));
  return to_hex(prop.uuid.bytes, sizeof prop.uuid.bytes);
}

stream stream::create(int device) {
  device = resolve(device, "stream::create");
  device_guard guard(device);
  cudaStream_t s = nullptr;
  ACTORCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // cudaStreamDestroy returns at once; the stream's queued work still runs to the end.
  return stream(device, std::shared_ptr<void>(s, [](void* p) {
                  (void)cudaStreamDestroy(static_cast<cudaStream_t>(p));
                }));
}

stream stream::default_stream(int device) {
  return stream(resolve(device, "default_stream"), nullptr);
}

stream stream::borrowed(int device, void* handle) {
  device = resolve(device, "stream::borrowed");
  if (handle == nullptr)
    return stream(device, nullptr);
  return stream(device, std::shared_ptr<void>(handle, [](void*) {}));
}

void stream::synchronize() const {
  device_guard guard(device_);
  ACTORCH_CUDA_CHECK(cudaStreamSynchronize(raw(*this)));
}

bool stream::query() const {
  device_guard guard(device_);
  return kernels::cuda::query_done(cudaStreamQuery(raw(*this)), "cudaStreamQuery");
}

void stream::wait_stream(const stream& other) const {
  if (other == *this)
    return;
  event e;
  e.record(other);
  e.wait(*this);
}

stream current_stream(int device) {
  device = resolve(device, "current_stream");
  // Not owned: whoever made the stream current keeps it alive (set_stream's contract).
  void* s = kernels::cuda::current_stream(device);
  return stream(device, s ? std::shared_ptr<void>(s, [](void*) {}) : nullptr);
}

void set_stream(const stream& s) {
  kernels::cuda::set_current_stream(s.device(), s.handle());
}

void synchronize(int device) {
  device_guard guard(resolve(device, "synchronize"));
  ACTORCH_CUDA_CHECK(cudaDeviceSynchronize());
}

event::event(bool enable_timing) : timing_(enable_timing) {}

void event::record() {
  record(current_stream());
}

void event::record(const stream& s) {
  device_guard guard(s.device());
  if (!handle_) {
    cudaEvent_t e = nullptr;
    ACTORCH_CUDA_CHECK(
        cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = std::shared_ptr<void>(
        e, [](void* p) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
    device_ = s.device();
  }
  ACTORCH_CHECK(device_ == s.device(), "event::record: the event belongs to cuda:", device_,
                " but the stream to cuda:", s.device());
  ACTORCH_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_.get()), raw(s)));
}

void event::wait(const stream& s) const {
  if (!handle_) // never recorded: nothing to wait for, as in PyTorch
    return;
  device_guard guard(s.device());
  ACTORCH_CUDA_CHECK(cudaStreamWaitEvent(raw(s), static_cast<cudaEvent_t>(handle_.get()), 0));
}

void event::synchronize() const {
  if (handle_)
    ACTORCH_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_.get())));
}

bool event::query() const {
  if (!handle_)
    return true;
  return kernels::cuda::query_done(cudaEventQuery(static_cast<cudaEvent_t>(handle_.get())),
                                   "cudaEventQuery");
}

float event::elapsed_time(const event& end) const {
  ACTORCH_CHECK(timing_ && end.timing_, "event::elapsed_time: both events need enable_timing");
  ACTORCH_CHECK(handle_ && end.handle_, "event::elapsed_time: both events must be recorded first");
  float ms = 0;
  ACTORCH_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_.get()),
                                          static_cast<cudaEvent_t>(end.handle_.get())));
  return ms;
}

device_guard::device_guard(int device) {
  if (device < 0)
    return;
  const int now = kernels::cuda::current_device();
  if (now != device) {
    kernels::cuda::switch_device(device);
    previous_ = now;
  }
}

device_guard::~device_guard() {
  if (previous_ >= 0)
    (void)cudaSetDevice(previous_);
}

stream_guard::stream_guard(const stream& s)
    : device_(s.device()), previous_stream_(kernels::cuda::current_stream(s.device())),
      stream_device_(s.device()) {
  kernels::cuda::set_current_stream(s.device(), s.handle());
}

stream_guard::~stream_guard() {
  kernels::cuda::set_current_stream(stream_device_, previous_stream_);
}

#else // !ACTORCH_HAVE_CUDA

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
int current_device() {
  fail_without_cuda("current_device");
}
void set_device(int) {
  fail_without_cuda("set_device");
}
std::string device_uuid(int) {
  fail_without_cuda("device_uuid");
}
stream stream::create(int) {
  fail_without_cuda("stream::create");
}
stream stream::default_stream(int) {
  fail_without_cuda("default_stream");
}
stream stream::borrowed(int, void*) {
  fail_without_cuda("stream::borrowed");
}
void stream::synchronize() const {}
bool stream::query() const {
  return true;
}
void stream::wait_stream(const stream&) const {}
stream current_stream(int) {
  fail_without_cuda("current_stream");
}
void set_stream(const stream&) {
  fail_without_cuda("set_stream");
}
void synchronize(int) {
  fail_without_cuda("synchronize");
}
event::event(bool enable_timing) : timing_(enable_timing) {}
void event::record() {
  fail_without_cuda("event::record");
}
void event::record(const stream&) {
  fail_without_cuda("event::record");
}
void event::wait(const stream&) const {}
void event::synchronize() const {}
bool event::query() const {
  return true;
}
float event::elapsed_time(const event&) const {
  fail_without_cuda("event::elapsed_time");
}
device_guard::device_guard(int device) {
  if (device >= 0)
    fail_without_cuda("device_guard");
}
device_guard::~device_guard() = default;
stream_guard::stream_guard(const stream&)
    : device_(-1), previous_stream_(nullptr), stream_device_(0) {
  fail_without_cuda("stream_guard");
}
stream_guard::~stream_guard() = default;

#endif

} // namespace actorch::cuda
