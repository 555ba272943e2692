// Elementwise CPU kernels over strided loops (see kernels/loop.hpp). Every operand of a call
// has one dtype `t` (the caller converts inputs first), except comparison outputs (bool) and
// where's condition (bool). Contiguous and scalar-broadcast rows run as plain loops that the
// compiler vectorises.
#pragma once

#include <cstddef>

#include "base/dtype.hpp"
#include "base/scalar.hpp"
#include "kernels/functors.hpp"
#include "kernels/loop.hpp"

namespace actorch::kernels::cpu {

// The ops are the CUDA twin's too (kernels/functors.hpp).
using kernels::binary_op;
using kernels::is_comparison;
using kernels::unary_op;

/// out = op(in); for clamp, out = min(max(in, lo), hi) (either bound may be absent).
/// loop: out (t), in (t).
void unary(unary_op op, dtype t, const strided_loop<2>& loop, const scalar* lo = nullptr,
           const scalar* hi = nullptr);

/// out = a op b; add and sub compute a + alpha * b and a - alpha * b.
/// loop: out (t, or bool for comparisons), a (t), b (t).
void binary(binary_op op, dtype t, const strided_loop<3>& loop, const scalar& alpha);

/// out = cond ? a : b. loop: out (t), cond (bool), a (t), b (t).
void where(dtype t, const strided_loop<4>& loop);

/// self = mask ? value : self. loop: self (t), mask (bool).
void masked_fill(dtype t, const strided_loop<2>& loop, const scalar& value);

/// The reductions of collectives (all_reduce, reduce, reduce_scatter).
enum class combine_op { sum, product, min, max, band, bor, bxor };

/// c = a op b over n contiguous elements; c may be a or b. The signature Gloo's algorithms and
/// the shared-memory all-reduce take.
using combine_fn = void (*)(void* c, const void* a, const void* b, size_t n);

/// The combine function of `op` on dtype `t`: the arithmetic of binary()'s add, mul, maximum
/// and minimum (NaN propagates from either side), so a MAX all-reduce and a tensor maximum
/// agree. Bool sums are OR and products AND. Throws for a bitwise op on a floating dtype.
combine_fn combine(combine_op op, dtype t);

} // namespace actorch::kernels::cpu
