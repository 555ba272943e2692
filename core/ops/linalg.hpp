// Matrix products with PyTorch's semantics: mm, addmm, bmm and matmul (with its rank rules and
// broadcasting of batch dims). Shapes, dtypes and layouts are checked and chosen here; the
// products run in kernels/cpu/gemm (OpenBLAS for float32/float64).
#pragma once

#include "core/tensor.hpp"

namespace actorch {

/// (m,k) x (k,n) -> (m,n). @pre both 2-D, same dtype (not bool).
tensor mm(const tensor& a, const tensor& b);

/// torch.mm(a, b, out=out): a @ b written into `out` ((m,n), contiguous, of a's dtype and
/// device, sharing no memory with a or b), which is returned. Records no graph; refused
/// where autograd would need one (out or an operand requires grad with grad mode on).
tensor mm_out(const tensor& out, const tensor& a, const tensor& b);

/// beta * input + alpha * (a @ b), input broadcast to (m,n). With beta == 0 the input is
/// ignored (NaNs in it do not propagate), as in PyTorch. Integer dtypes take integral
/// alpha and beta.
tensor addmm(const tensor& input, const tensor& a, const tensor& b, const scalar& beta = 1,
             const scalar& alpha = 1);

/// (B,m,k) x (B,k,n) -> (B,m,n). @pre both 3-D with the same batch size.
tensor bmm(const tensor& a, const tensor& b);

/// torch.matmul: 1-D.1-D gives a 0-dim dot product; 2-D.2-D is mm; a 1-D first argument is
/// treated as a row vector and a 1-D second argument as a column vector, the added dim being
/// removed from the result; with more dims, the leading (batch) dims broadcast.
tensor matmul(const tensor& a, const tensor& b);

} // namespace actorch
