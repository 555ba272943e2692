// Sliding-window CUDA kernels: the twins of kernels/cpu/window.hpp, same names, operands and
// contracts, running kernels/window.hpp's per-element code one thread per output element.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/window.hpp"

namespace actorch::kernels::cuda {

void im2col(dtype t, const void* x, void* col, const window2d& g);
void col2im(dtype t, const void* col, void* x, const window2d& g);
void max_pool2d(dtype t, const void* x, void* y, int64_t* index, const window2d& g);
void max_pool2d_backward(dtype t, const void* gy, const int64_t* index, void* gx,
                         const window2d& g);
void avg_pool2d(dtype t, const void* x, void* y, const window2d& g, const average_rule& r);
void avg_pool2d_backward(dtype t, const void* gy, void* gx, const window2d& g,
                         const average_rule& r);

} // namespace actorch::kernels::cuda
