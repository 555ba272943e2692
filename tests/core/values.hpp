// Reading tensors back as plain vectors in tests, so expectations are written as numbers.
#pragma once

#include <cmath>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::test {

/// The values of t (on any device) in C order, converted to double.
inline std::vector<double> values_of(const tensor& t) {
  const tensor c = t.cpu().to(dtype::float64).contiguous();
  const double* p = c.data_ptr<double>();
  return {p, p + c.numel()};
}

/// The values of t in C order, converted to int64 (exact for every integer dtype).
inline std::vector<int64_t> ints_of(const tensor& t) {
  const tensor c = t.cpu().to(dtype::int64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return {p, p + c.numel()};
}

/// Element-wise a == b (which lets equal infinities pass) or |a - b| <= tol * (1 + |b|), and
/// equal lengths.
inline bool close(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-6) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]))))
      return false;
  return true;
}

} // namespace actorch::test
