// Softmax and log-softmax CUDA kernels, forward and backward: the twins of
// kernels/cpu/softmax.hpp over the same dense (outer, N, inner) layout and contracts.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"

namespace actorch::kernels::cuda {

void softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N, int64_t inner);
void log_softmax_forward(dtype t, const void* in, void* out, int64_t outer, int64_t N,
                         int64_t inner);
void softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in, int64_t outer,
                      int64_t N, int64_t inner);
void log_softmax_backward(dtype t, const void* grad_out, const void* out, void* grad_in,
                          int64_t outer, int64_t N, int64_t inner);

} // namespace actorch::kernels::cuda
