// Runs a kernel on the device its tensors live on: kernels::cpu::name or its CUDA twin
// kernels::cuda::name (same name, same arguments), the CUDA one with the tensors' device made
// current for the call so that it launches on that device's current stream. Where actorch was
// built without CUDA no CUDA tensor can exist, and the CUDA branch is not even compiled.
#pragma once

#include <type_traits>

#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/device.hpp"

namespace actorch::detail {

template <class F> void run_on(const device& d, F&& f) {
  if (d.is_cuda()) {
    if constexpr (ACTORCH_HAVE_CUDA) {
      cuda::device_guard guard(d.index);
      f(std::true_type{});
    } else {
      fail_without_cuda("a CUDA kernel");
    }
  } else {
    f(std::false_type{});
  }
}

} // namespace actorch::detail

/// ACTORCH_KERNEL(device, name, args...): kernels::cpu::name(args...) or, for a CUDA device,
/// kernels::cuda::name(args...). The caller has checked that every operand is on `device`.
#define ACTORCH_KERNEL(dev, name, ...)                                                             \
  ::actorch::detail::run_on((dev), [&](auto on_cuda_) {                                            \
    if constexpr (decltype(on_cuda_)::value)                                                       \
      ::actorch::kernels::cuda::name(__VA_ARGS__);                                                 \
    else                                                                                           \
      ::actorch::kernels::cpu::name(__VA_ARGS__);                                                  \
  })
