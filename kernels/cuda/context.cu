// This thread's current device and per-device current streams (see context.hpp).
#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"

namespace actorch::kernels::cuda {

namespace {
// Index: the device ordinal. Grown on first use of a device by this thread.
thread_local std::vector<void*> current_streams;
thread_local bool chose_device = false; // set_device was called on this thread
std::atomic<int> home_device{-1};
} // namespace

int current_device() {
  int device = 0;
  ACTORCH_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int device) {
  switch_device(device);
  chose_device = true;
  int none = -1;
  home_device.compare_exchange_strong(none, device);
}

void switch_device(int device) {
  ACTORCH_CUDA_CHECK(cudaSetDevice(device));
}

void adopt_home_device() {
  const int home = home_device.load();
  if (chose_device || home < 0)
    return;
  chose_device = true;
  (void)cudaSetDevice(home); // a failure leaves the runtime's device, as before
  (void)cudaGetLastError();
}

void* current_stream(int device) {
  return size_t(device) < current_streams.size() ? current_streams[size_t(device)] : nullptr;
}

void set_current_stream(int device, void* stream) {
  ACTORCH_CHECK(device >= 0, "set_current_stream: invalid device ", device);
  if (size_t(device) >= current_streams.size())
    current_streams.resize(size_t(device) + 1, nullptr);
  current_streams[size_t(device)] = stream;
}

} // namespace actorch::kernels::cuda
