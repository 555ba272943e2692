// Matrix multiply on a CUDA device through cuBLAS: the twins of kernels/cpu/gemm.hpp, with the
// same row-major operands (cpu::gemm_operand) and contracts. float32 runs in float32 (no TF32,
// PyTorch's default), float64 in float64, float16 and bfloat16 accumulate in float32. cuBLAS
// has no integer GEMM here and PyTorch's CUDA matmul has none either: they are refused.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "base/scalar.hpp"
#include "kernels/cpu/gemm.hpp"

namespace actorch::kernels::cuda {

using cpu::gemm_operand;

void gemm(dtype t, int64_t m, int64_t n, int64_t k, const scalar& alpha, const gemm_operand& a,
          const gemm_operand& b, const scalar& beta, void* c, int64_t ldc);
void gemm_batched(dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, const scalar& alpha,
                  const gemm_operand& a, int64_t stride_a, const gemm_operand& b, int64_t stride_b,
                  const scalar& beta, void* c, int64_t ldc, int64_t stride_c);

} // namespace actorch::kernels::cuda
