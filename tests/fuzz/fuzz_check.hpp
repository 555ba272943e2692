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

#include "core/ops/elementwise.hpp"
#include "core/serialize/pickle.hpp"
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

/// `a` and `b` are the same value: kinds, items in order, tensors by dtype, shape and values.
inline bool same(const actorch::pickle_value& a, const actorch::pickle_value& b) {
  using actorch::pickle_value;
  if (a.v.index() != b.v.index())
    return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, pickle_value::none>) {
          return true;
        } else if constexpr (std::is_same_v<T, pickle_value::tuple> ||
                             std::is_same_v<T, pickle_value::list>) {
          if (x.items.size() != y.items.size())
            return false;
          for (size_t i = 0; i < x.items.size(); ++i)
            if (!same(x.items[i], y.items[i]))
              return false;
          return true;
        } else if constexpr (std::is_same_v<T, pickle_value::dict>) {
          if (x.items.size() != y.items.size() || x.ordered != y.ordered)
            return false;
          for (size_t i = 0; i < x.items.size(); ++i)
            if (!same(x.items[i].first, y.items[i].first) ||
                !same(x.items[i].second, y.items[i].second))
              return false;
          return true;
        } else if constexpr (std::is_same_v<T, actorch::tensor>) {
          return x.dtype() == y.dtype() && x.sizes() == y.sizes() &&
                 actorch::equal(x.contiguous(), y.contiguous());
        } else if constexpr (std::is_same_v<T, double>) {
          return x == y || (x != x && y != y); // NaN is NaN
        } else {
          return x == y;
        }
      },
      a.v);
}

} // namespace actorch::fuzz
