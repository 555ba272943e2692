// numpy's .npy format, read into and written from tensors, so that arrays dumped by numpy or
// PyTorch scripts (reference values, data sets) load directly and ours open in numpy.
// Reads versions 1.0, 2.0 and 3.0 of little-endian C-order arrays of the dtypes actorch shares
// with numpy; writes version 1.0 (2.0 when the header outgrows 65535 bytes).
// See Note [npy layout] in npy.cpp for the format and what is rejected.
#pragma once

#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace actorch {

/// np.load for one .npy file: a new contiguous CPU tensor with the file's shape and dtype
/// ('<f4' float32, '<f8' float64, '<f2' float16, '|i1' int8, '|u1' uint8, '<i2' int16, '<i4' int32,
/// '<i8' int64, '|b1' bool). Throws actorch::error naming `path` and the problem for a file
/// that is not a valid .npy of those dtypes: bad magic or version, malformed header,
/// big-endian or Fortran-order data, a size that does not match the shape (truncated data or
/// trailing bytes after it), bool bytes other than 0 and 1.
tensor load_npy(const std::string& path);

/// np.save: writes `t`'s values in C order (a non-contiguous tensor is made contiguous, a
/// CUDA tensor is copied to the CPU first). bfloat16 has no numpy dtype and is rejected.
/// The file is written to a temporary file in the same directory, fsync'ed and renamed over
/// `path`. @post on failure `path` is untouched and no temporary file is left behind.
void save_npy(const std::string& path, const tensor& t);

/// load_npy over bytes already in memory; `name_for_errors` stands in for the path in messages.
tensor npy_from_bytes(std::string_view bytes, const std::string& name_for_errors);

/// The bytes save_npy would write for `t`.
std::string npy_to_bytes(const tensor& t);

} // namespace actorch
