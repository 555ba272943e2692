// torch.nn.functional's sliding-window ops over images, with autograd: unfold and fold,
// conv1d and conv2d (im2col, then one matrix product per group on OpenBLAS or cuBLAS), max and
// average pooling, fixed and adaptive. Arguments, defaults, output sizes and errors are torch's.
// The loops are kernels/window.hpp's, shared by the CPU and CUDA kernels.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace actorch {

/// An argument torch takes as an int or a pair for the two spatial dims (its _pair):
/// `3` is {3, 3}, `{3, 5}` is 3 along H and 5 along W.
struct int2 {
  int64_t h, w;
  int2(int64_t v) : h(v), w(v) {} // NOLINT(google-explicit-constructor): torch's int or pair
  int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool operator==(const int2&) const = default;
};

/// A convolution's padding: numbers per spatial dim (one number for all), or torch's strings
/// "valid" (none) and "same" (the output as large as the input; stride 1 only; an odd total
/// pads one more after than before, as torch does).
struct conv_padding {
  conv_padding(int64_t v) : values{v} {} // NOLINT(google-explicit-constructor)
  conv_padding(int v) : values{v} {}     // NOLINT(google-explicit-constructor): 0 is no pointer
  conv_padding(int64_t h, int64_t w) : values{h, w} {}
  conv_padding(const char* m) : mode(m) {}            // NOLINT(google-explicit-constructor)
  conv_padding(std::string m) : mode(std::move(m)) {} // NOLINT(google-explicit-constructor)
  std::string mode;                                   // "", "same" or "valid"
  std::vector<int64_t> values;                        // with mode ""
};

/// F.unfold: (N, C, H, W) -> (N, C * kh * kw, L), each column the patch one output position
/// reads (zeros in padding), L the number of positions. A 3-D (C, H, W) input gives (C*kh*kw, L).
tensor unfold(const tensor& input, int2 kernel_size, int2 dilation = 1, int2 padding = 0,
              int2 stride = 1);
/// F.fold, unfold's adjoint: (N, C * kh * kw, L) -> (N, C, output_size), overlapping values
/// summed. L must be the number of positions unfold gives for output_size.
tensor fold(const tensor& input, int2 output_size, int2 kernel_size, int2 dilation = 1,
            int2 padding = 0, int2 stride = 1);

/// F.conv2d: input (N, C_in, H, W) or unbatched (C_in, H, W); weight (C_out, C_in / groups, kh,
/// kw); bias (C_out) or undefined. Padding is zeros (torch's padding_mode="zeros").
tensor conv2d(const tensor& input, const tensor& weight, const tensor& bias = {}, int2 stride = 1,
              const conv_padding& padding = 0, int2 dilation = 1, int64_t groups = 1);
/// F.conv1d: input (N, C_in, L) or (C_in, L); weight (C_out, C_in / groups, k).
tensor conv1d(const tensor& input, const tensor& weight, const tensor& bias = {},
              int64_t stride = 1, const conv_padding& padding = 0, int64_t dilation = 1,
              int64_t groups = 1);

/// F.max_pool2d over (N, C, H, W) or (C, H, W): stride defaults to kernel_size; padding (at
/// most half the kernel) reads as -inf; ceil_mode keeps a last window that starts inside the
/// input or its left padding.
tensor max_pool2d(const tensor& input, int2 kernel_size, std::optional<int2> stride = {},
                  int2 padding = 0, int2 dilation = 1, bool ceil_mode = false);
/// max_pool2d and, as torch's return_indices=True, each maximum's position in its plane
/// (h * W + w, int64).
std::pair<tensor, tensor> max_pool2d_with_indices(const tensor& input, int2 kernel_size,
                                                  std::optional<int2> stride = {}, int2 padding = 0,
                                                  int2 dilation = 1, bool ceil_mode = false);
/// F.avg_pool2d: padding counts as zeros in the divisor when count_include_pad; a nonzero
/// divisor_override divides every window by that number instead.
tensor avg_pool2d(const tensor& input, int2 kernel_size, std::optional<int2> stride = {},
                  int2 padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = {});
/// F.adaptive_avg_pool2d: output_size (oh, ow) windows of [floor(i * in / out),
/// ceil((i + 1) * in / out)) along each dim.
tensor adaptive_avg_pool2d(const tensor& input, int2 output_size);
/// F.adaptive_max_pool2d, with the same windows.
tensor adaptive_max_pool2d(const tensor& input, int2 output_size);

} // namespace actorch
