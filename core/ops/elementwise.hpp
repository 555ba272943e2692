// Elementwise ops with broadcasting and PyTorch's type promotion (torch.result_type): the
// arithmetic, unary math, comparisons and where. In-place forms are tensor methods (add_, ...).
#pragma once

#include <optional>

#include "core/tensor.hpp"

namespace actorch {

/// torch.result_type of two operands (0-dim tensors and numbers count only when they are of a
/// higher category: bool < integer < floating).
dtype result_type(const tensor& a, const tensor& b);
dtype result_type(const tensor& a, const scalar& b);

tensor add(const tensor& a, const tensor& b, const scalar& alpha = 1);
tensor sub(const tensor& a, const tensor& b, const scalar& alpha = 1);
tensor mul(const tensor& a, const tensor& b);
/// True division: integer inputs give float32.
tensor div(const tensor& a, const tensor& b);
tensor pow(const tensor& base, const tensor& exponent);
tensor pow(const tensor& base, const scalar& exponent);
/// Elementwise max / min of two tensors (NaN propagates).
tensor maximum(const tensor& a, const tensor& b);
tensor minimum(const tensor& a, const tensor& b);

tensor neg(const tensor& t);
tensor abs(const tensor& t);
/// exp, log, sqrt, sigmoid and tanh of integer or bool tensors give float32.
tensor exp(const tensor& t);
tensor log(const tensor& t);
tensor sqrt(const tensor& t);
tensor sigmoid(const tensor& t);
tensor tanh(const tensor& t);
tensor relu(const tensor& t);
/// Either bound may be left out by passing std::nullopt.
tensor clamp(const tensor& t, const std::optional<scalar>& min, const std::optional<scalar>& max);

/// Comparisons give bool tensors.
tensor eq(const tensor& a, const tensor& b);
tensor ne(const tensor& a, const tensor& b);
tensor lt(const tensor& a, const tensor& b);
tensor le(const tensor& a, const tensor& b);
tensor gt(const tensor& a, const tensor& b);
tensor ge(const tensor& a, const tensor& b);

/// cond ? a : b, all three broadcast together. @pre cond is bool.
tensor where(const tensor& cond, const tensor& a, const tensor& b);
tensor where(const tensor& cond, const tensor& a, const scalar& b);
tensor where(const tensor& cond, const scalar& a, const tensor& b);

/// t with value wherever mask (bool, broadcast to t) is true.
tensor masked_fill(const tensor& t, const tensor& mask, const scalar& value);

/// torch.equal: same shape and the same values (dtypes may differ).
bool equal(const tensor& a, const tensor& b);
/// torch.allclose: |a - b| <= atol + rtol * |b| everywhere (NaNs equal only with equal_nan).
bool allclose(const tensor& a, const tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

} // namespace actorch
