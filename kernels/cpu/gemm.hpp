// Matrix multiply on the CPU: C = alpha * op(A) op(B) + beta * C over row-major matrices with
// leading dims and transpose flags, the kernel behind mm, addmm, bmm and matmul
// (core/ops/linalg). float32 and float64 go to OpenBLAS; the other dtypes run a blocked loop.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "base/scalar.hpp"

namespace actorch::kernels::cpu {

/// One row-major matrix operand. With trans == false it is stored as rows x cols of op(X);
/// with trans == true it is stored transposed (op(X) = X^T). `ld` is the distance in elements
/// between consecutive stored rows, as BLAS's lda.
struct gemm_operand {
  const void* data = nullptr;
  int64_t ld = 1;
  bool trans = false;
};

/// C = alpha * op(A) op(B) + beta * C, with op(A) (m,k), op(B) (k,n) and C (m,n) row-major
/// with leading dim ldc. When beta == 0, C is only written, never read (NaNs in it vanish),
/// as in BLAS. Bool is rejected; integer dtypes take integral alpha and beta.
/// @pre every pointer holds dtype `t`; each ld is at least the stored row length (and >= 1).
void gemm(dtype t, int64_t m, int64_t n, int64_t k, const scalar& alpha, const gemm_operand& a,
          const gemm_operand& b, const scalar& beta, void* c, int64_t ldc);

/// `batch` independent gemms; matrix i of each operand starts stride_* elements after matrix
/// i - 1. stride_a or stride_b may be 0 (a matrix broadcast over the batch); stride_c may not.
void gemm_batched(dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, const scalar& alpha,
                  const gemm_operand& a, int64_t stride_a, const gemm_operand& b, int64_t stride_b,
                  const scalar& beta, void* c, int64_t ldc, int64_t stride_c);

} // namespace actorch::kernels::cpu
