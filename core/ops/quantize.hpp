// Per-tensor affine quantization (torch.quantize_per_tensor): a float32 tensor becomes integers
// q = clamp(round(x / scale) + zero_point, qmin, qmax) of dtype qint8, quint8 or qint32, and
// dequantize() maps them back to (q - zero_point) * scale. The loops are in kernels/cpu/quantize.
//
// Note [Quantized tensors]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A quantized tensor here is its own type, quantized_tensor: an int8 / uint8 / int32 tensor
// (the int_repr) plus scale, zero point and the quantized dtype, not three more members of
// `dtype`. Every kernel, the promotion table, printing, .npy, safetensors and both process
// groups switch over `dtype`; quantized dtypes there would either reach those switches as
// plain integers (so q + 1 would silently add to the codes, where PyTorch refuses) or need a
// refusal in each of them. As a separate type, arithmetic on quantized values does not
// compile, and the integer codes are reached only through int_repr(), as in PyTorch.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>

#include "core/tensor.hpp"

namespace actorch {

/// torch.qint8, torch.quint8, torch.qint32.
enum class qdtype : uint8_t { qint8, quint8, qint32 };

/// "qint8", "quint8", "qint32".
std::string_view qdtype_name(qdtype t);
/// The dtype holding the integer codes: int8, uint8, int32.
dtype underlying_dtype(qdtype t);
/// The range of the codes: [-128, 127], [0, 255], [-2^31, 2^31 - 1].
int64_t quant_min(qdtype t);
int64_t quant_max(qdtype t);

/// A per-tensor affine quantized tensor. See Note [Quantized tensors].
class quantized_tensor {
public:
  /// An undefined quantized tensor (defined() == false).
  quantized_tensor() = default;
  /// torch._make_per_tensor_quantized_tensor: adopts `int_repr` (shared, not copied) as the
  /// codes. @pre int_repr's dtype is underlying_dtype(t); scale > 0 and finite; zero_point in
  /// [quant_min(t), quant_max(t)].
  quantized_tensor(tensor int_repr, double scale, int64_t zero_point, qdtype t);

  bool defined() const { return codes_.defined(); }
  qdtype dtype() const { return dtype_; }
  const shape_t& sizes() const { return codes_.sizes(); }
  int64_t dim() const { return codes_.dim(); }
  int64_t numel() const { return codes_.numel(); }
  double q_scale() const { return scale_; }
  int64_t q_zero_point() const { return zero_point_; }
  /// A copy of the integer codes as a contiguous int8 / uint8 / int32 tensor.
  tensor int_repr() const;
  /// (q - zero_point) * scale as float32, in the codes' shape.
  tensor dequantize() const;

private:
  tensor codes_; // contiguous, dtype underlying_dtype(dtype_)
  double scale_ = 1.0;
  int64_t zero_point_ = 0;
  qdtype dtype_ = qdtype::qint8;
};

/// torch.quantize_per_tensor: round half to even, then saturate to the dtype's range.
/// @pre input is a float32 CPU tensor (as in PyTorch; convert with to(float32)); scale > 0,
/// finite, and 1 / scale finite in float (PyTorch accepts scale <= 0 and produces garbage;
/// actorch refuses it); zero_point within the dtype's range.
quantized_tensor quantize_per_tensor(const tensor& input, double scale, int64_t zero_point,
                                     qdtype dtype);
/// Free-function spellings of the members, as torch.dequantize / torch.int_repr ...
tensor dequantize(const quantized_tensor& q);
tensor int_repr(const quantized_tensor& q);
double q_scale(const quantized_tensor& q);
int64_t q_zero_point(const quantized_tensor& q);

/// PyTorch's rendering: the dequantized values, then size, dtype, scheme, scale and zero point:
/// tensor([2.], size=(1,), dtype=torch.qint32,
///        quantization_scheme=torch.per_tensor_affine, scale=0.1, zero_point=0)
std::ostream& operator<<(std::ostream& os, const quantized_tensor& q);

} // namespace actorch
