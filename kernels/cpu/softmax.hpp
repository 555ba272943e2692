// Softmax and log-softmax CPU kernels, forward and backward, along the middle dim of a dense
// (outer, N, inner) layout: inner == 1 is the last-dim case (one contiguous row per softmax);
// inner > 1 walks N rows of `inner` contiguous columns, so every loop stays contiguous.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"

namespace actorch::kernels::cpu {

/// out = exp(x - max) / sum(exp(x - max)) along N. in and out are (outer, N, inner),
/// contiguous, dtype t (floating). 16-bit floats compute in float; sums accumulate in double.
void softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N, int64_t inner);

/// out = (x - max) - log(sum(exp(x - max))) along N. Layout as softmax_forward.
void log_softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N,
                         int64_t inner);

/// grad_in = out * (grad_out - sum(grad_out * out)) along N, with out softmax's output.
/// grad_out, out and grad_in are (outer, N, inner), contiguous, dtype t.
void softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in, int64_t outer,
                      int64_t N, int64_t inner);

/// grad_in = grad_out - exp(out) * sum(grad_out) along N, with out log_softmax's output.
/// Layout as softmax_backward.
void log_softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in,
                          int64_t outer, int64_t N, int64_t inner);

} // namespace actorch::kernels::cpu
