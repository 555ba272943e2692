// DLPack (Debian's libdlpack-dev, version 0.6): tensors handed to and taken from numpy,
// PyTorch, CuPy and the like without a copy, as torch.utils.dlpack.to_dlpack / from_dlpack.
// The producer's memory lives until the consumer calls the DLManagedTensor's deleter; strides
// are kept, so a transposed view stays a transposed view. See Note [DLPack] in dlpack.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include "core/tensor.hpp"

namespace actorch {

/// A DLManagedTensor over `t`'s memory (zero-copy) that keeps t's storage alive until its
/// deleter is called (the consumer's duty, exactly once). Device: kDLCPU for host memory,
/// pinned or not (as PyTorch exports it, and numpy takes only kDLCPU), kDLCUDA for CUDA memory.
/// Throws actorch::error naming the dtype for bool, which DLPack 0.6 cannot express (PyTorch 1.13
/// refuses it too), and for an undefined tensor.
DLManagedTensor* to_dlpack(const tensor& t);

/// A tensor over `m`'s memory (zero-copy), with m's shape, strides and byte offset; m's
/// deleter runs when the last tensor sharing that memory is gone. kDLCPU and kDLCUDAHost
/// memory gives a CPU tensor, kDLCUDA memory a CUDA tensor (with CUDA built in). Throws
/// actorch::error naming what is wrong for a dtype actorch lacks (complex, lanes > 1, odd
/// bits), another device, a negative stride, a null or misaligned data pointer; then `m` is
/// not taken and stays the caller's to delete.
tensor from_dlpack(DLManagedTensor* m);

} // namespace actorch
