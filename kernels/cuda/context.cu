// This thread's current device and per-device current streams (see context.hpp).
#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/launch.cuh"

namespace actorch::kernels::cuda {

namespace {
// Index: the device ordinal. Grown on first use of a device by this thread.
thread_local std::vector<void*> current_streams;
} // namespace

int current_device() {
  int device = 0;
  ACTORCH_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int device) {
  ACTORCH_CUDA_CHECK(cudaSetDevice(device));
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
