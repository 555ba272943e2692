// What the fuzz targets check of a parse that succeeded (tests/fuzz/README.md). A failed check
// prints what broke and aborts, which libFuzzer reports as a crash with the input that did it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ops/factory.hpp"
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

/// `b`, read back from what `a` was written as, has a's dtype, shape and bytes.
inline void check_round_trip(const tensor& a, const tensor& b) {
  require(a.dtype() == b.dtype(), "round trip changed the dtype");
  require(a.sizes() == b.sizes(), "round trip changed the shape");
  const tensor ca = a.contiguous(), cb = b.contiguous();
  require(ca.nbytes() == cb.nbytes() &&
              (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0),
          "round trip changed the values");
}

/// Every element of `t` still equals `value` (a refused load wrote nothing).
inline void check_all(const tensor& t, double value) {
  const tensor expected = full(t.sizes(), value, {.dtype = t.dtype()});
  require(std::memcmp(t.contiguous().data_ptr(), expected.data_ptr(), t.nbytes()) == 0,
          "a refused load_into wrote into a target");
}

} // namespace actorch::fuzz
