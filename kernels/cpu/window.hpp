// Sliding-window kernels over (planes, H, W) images: im2col and col2im, max and average pooling
// (fixed or adaptive) and their gradients. The per-element code is kernels/window.hpp's, shared
// with the CUDA twins; every operand is contiguous and of dtype t (floating point), the max
// pooling indices int64.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/window.hpp"

namespace actorch::kernels::cpu {

/// col (planes * kh * kw, out.h * out.w) from x (planes, in.h, in.w).
void im2col(dtype t, const void* x, void* col, const window2d& g);
/// x (planes, in.h, in.w) = the sum of what im2col read from each element of col.
void col2im(dtype t, const void* col, void* x, const window2d& g);
/// y and index (planes, out.h, out.w): each window's maximum and its position in the plane.
void max_pool2d(dtype t, const void* x, void* y, int64_t* index, const window2d& g);
/// gx (planes, in.h, in.w) from gy and max_pool2d's index.
void max_pool2d_backward(dtype t, const void* gy, const int64_t* index, void* gx,
                         const window2d& g);
/// y (planes, out.h, out.w): each window's sum over average_window's divisor.
void avg_pool2d(dtype t, const void* x, void* y, const window2d& g, const average_rule& r);
/// gx (planes, in.h, in.w) from gy.
void avg_pool2d_backward(dtype t, const void* gy, void* gx, const window2d& g,
                         const average_rule& r);

} // namespace actorch::kernels::cpu
