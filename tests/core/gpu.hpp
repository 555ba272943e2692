// What the [cuda] tests of every layer share: the GPU they run on, and the skip that names why
// a machine has none (they pass at once there, as CI, which has no GPU, runs them).
#pragma once

#include <catch2/catch.hpp>

#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/device.hpp"

namespace actorch::test {

inline const device kGPU{"cuda:0"};

} // namespace actorch::test

/// Returns from a [cuda] test (passing it) where no GPU is present, saying why.
#define SKIP_WITHOUT_GPU()                                                                         \
  do {                                                                                             \
    if (!::actorch::cuda::is_available()) {                                                        \
      WARN("skipped, no GPU: " << ::actorch::cuda_unavailable_reason());                           \
      return;                                                                                      \
    }                                                                                              \
  } while (false)
