// Small text helpers shared by every layer: hex digits and joined lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorch {

/// Appends byte `b` as two lowercase hex digits.
inline void append_hex(std::string& out, uint8_t b) {
  static constexpr char digits[] = "0123456789abcdef";
  out += digits[b >> 4];
  out += digits[b & 15];
}

/// `n` bytes as lowercase hex, `sep` between bytes when it is not '\0'.
inline std::string to_hex(const void* data, size_t n, char sep = '\0') {
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve(n * (sep ? 3 : 2));
  for (size_t i = 0; i < n; ++i) {
    if (sep && i > 0)
      out += sep;
    append_hex(out, p[i]);
  }
  return out;
}

/// `v` as exactly `digits` lowercase hex digits (the low ones), zero-padded.
inline std::string to_hex_digits(uint64_t v, int digits) {
  static constexpr char d[] = "0123456789abcdef";
  std::string out(size_t(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4)
    out[size_t(i)] = d[v & 15];
  return out;
}

/// The numbers with `sep` between them: join_numbers({0, 2}, ", ") is "0, 2".
inline std::string join_numbers(const std::vector<int>& values, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0)
      out += sep;
    out += std::to_string(values[i]);
  }
  return out;
}

} // namespace actorch
