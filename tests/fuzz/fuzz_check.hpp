// What the fuzz targets check (tests/fuzz/README.md). A failed check prints what broke and
// aborts, which libFuzzer reports as a crash with the input that did it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/tensor.hpp"

namespace actorch::fuzz {

inline void require(bool ok, const char* what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::abort();
}

/// A path whose file holds exactly `data`, for readers that take a path: an in-memory file,
/// one per target process, rewritten for each input.
inline std::string as_file(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz-input", 0);
  require(fd >= 0, "memfd_create failed");
  require(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == ssize_t(size),
          "writing the in-memory file failed");
  return "/proc/self/fd/" + std::to_string(fd);
}

/// `a` and `b` have the same dtype, shape and bytes; otherwise fails with `what`.
inline void check_same(const tensor& a, const tensor& b, const char* what) {
  require(a.dtype() == b.dtype() && a.sizes() == b.sizes(), what);
  const tensor ca = a.contiguous(), cb = b.contiguous();
  require(ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0, what);
}

} // namespace actorch::fuzz
