// Copies that cross between the host and a GPU, or between GPUs: tensor::copy_'s and to()'s
// path when the two tensors are on different devices. PyTorch's rules: a copy from or to
// pinned host memory with non_blocking is asynchronous on the current stream of the GPU's
// device; every other one returns only once the data has arrived.
#pragma once

#include <cstddef>

#include "core/tensor.hpp"

namespace actorch::cuda {

/// dst = src (broadcast to dst's shape, converted to dst's dtype), where dst and src are on
/// different devices and at least one is a GPU. `source_pinned`: the caller vouches that src
/// is page-locked host memory (not made by pinned_allocator(), as the loader's pool buffers)
/// that it keeps untouched until the copy completes (an event it records after this call).
/// @pre the shapes broadcast (tensor::copy_ checks and names them).
void copy_across_devices(tensor dst, const tensor& src, bool non_blocking,
                         bool source_pinned = false);

/// Whether `t`'s memory is page-locked host memory (torch.Tensor.is_pinned).
bool is_pinned(const tensor& t);

/// Copies `nbytes` from device memory `src` on `device` into host memory `dst`, after the
/// device's current stream has run what is queued on it (item() reads this way).
void read_to_host(void* dst, const void* src, size_t nbytes, int device);

} // namespace actorch::cuda
