// quantize_per_tensor / dequantize: argument checks and layout here, the loops in
// kernels/cpu/quantize. See Note [Quantized tensors] in quantize.hpp for why a quantized tensor
// is a type of its own.
#include "core/ops/quantize.hpp"

#include <charconv>
#include <cmath>
#include <limits>

#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/quantize.hpp"
#include "kernels/cuda/quantize.hpp"

namespace actorch {

namespace kc = kernels::cpu;

std::string_view qdtype_name(qdtype t) {
  switch (t) {
  case qdtype::qint8: return "qint8";
  case qdtype::quint8: return "quint8";
  case qdtype::qint32: return "qint32";
  }
  return "unknown";
}

dtype underlying_dtype(qdtype t) {
  switch (t) {
  case qdtype::qint8: return dtype::int8;
  case qdtype::quint8: return dtype::uint8;
  case qdtype::qint32: return dtype::int32;
  }
  return dtype::int8;
}

int64_t quant_min(qdtype t) {
  switch (t) {
  case qdtype::qint8: return std::numeric_limits<int8_t>::min();
  case qdtype::quint8: return 0;
  case qdtype::qint32: return std::numeric_limits<int32_t>::min();
  }
  return 0;
}

int64_t quant_max(qdtype t) {
  switch (t) {
  case qdtype::qint8: return std::numeric_limits<int8_t>::max();
  case qdtype::quint8: return std::numeric_limits<uint8_t>::max();
  case qdtype::qint32: return std::numeric_limits<int32_t>::max();
  }
  return 0;
}

namespace {

void check_params(const char* op, double scale, int64_t zero_point, qdtype t) {
  ACTORCH_CHECK(std::isfinite(scale) && scale > 0, op,
                ": scale must be a positive finite number "
                "but got ",
                scale);
  ACTORCH_CHECK(std::isfinite(1.0f / float(scale)), op, ": scale ", scale,
                " is too small: 1 / scale overflows float32");
  ACTORCH_CHECK(zero_point >= quant_min(t) && zero_point <= quant_max(t), op, ": zero_point ",
                zero_point, " is outside the range of ", qdtype_name(t), " [", quant_min(t), ", ",
                quant_max(t), "]");
}

// Python's repr of a float: shortest round-trip digits, with ".0" on integral values.
std::string py_float(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eni") == std::string::npos)
    s += ".0";
  return s;
}

} // namespace

quantized_tensor::quantized_tensor(tensor int_repr, double scale, int64_t zero_point, qdtype t)
    : scale_(scale), zero_point_(zero_point), dtype_(t) {
  const char* op = "quantized_tensor";
  check_defined(op, {&int_repr});
  ACTORCH_CHECK(int_repr.dtype() == underlying_dtype(t), op, ": ", qdtype_name(t),
                " codes must be ", dtype_name(underlying_dtype(t)), " but got ",
                dtype_name(int_repr.dtype()));
  check_params(op, scale, zero_point, t);
  codes_ = int_repr.contiguous();
}

tensor quantized_tensor::int_repr() const {
  ACTORCH_CHECK(defined(), "int_repr: the quantized tensor is undefined");
  return codes_.clone();
}

tensor quantized_tensor::dequantize() const {
  ACTORCH_CHECK(defined(), "dequantize: the quantized tensor is undefined");
  tensor out = empty(codes_.sizes(), {.dtype = dtype::float32, .device = codes_.device()});
  ACTORCH_KERNEL(codes_.device(), dequantize_per_tensor, codes_.dtype(), codes_.data_ptr(),
                 out.data_ptr<float>(), codes_.numel(), scale_, zero_point_);
  return out;
}

quantized_tensor quantize_per_tensor(const tensor& input, double scale, int64_t zero_point,
                                     qdtype dtype) {
  const char* op = "quantize_per_tensor";
  check_defined(op, {&input});
  ACTORCH_CHECK(input.dtype() == dtype::float32, op, ": expected a float32 input but got ",
                dtype_name(input.dtype()), " (convert with to(float32) first, as PyTorch asks)");
  check_params(op, scale, zero_point, dtype);
  const tensor in = input.contiguous();
  tensor codes = empty(input.sizes(), {.dtype = underlying_dtype(dtype), .device = input.device()});
  // PyTorch multiplies by the float reciprocal rather than dividing (quantize_val).
  const float inv_scale = 1.0f / float(scale);
  ACTORCH_KERNEL(input.device(), quantize_per_tensor, codes.dtype(), in.data_ptr<float>(),
                 codes.data_ptr(), in.numel(), inv_scale, zero_point);
  return quantized_tensor(std::move(codes), scale, zero_point, dtype);
}

tensor dequantize(const quantized_tensor& q) {
  return q.dequantize();
}
tensor int_repr(const quantized_tensor& q) {
  return q.int_repr();
}
double q_scale(const quantized_tensor& q) {
  return q.q_scale();
}
int64_t q_zero_point(const quantized_tensor& q) {
  return q.q_zero_point();
}

std::ostream& operator<<(std::ostream& os, const quantized_tensor& q) {
  if (!q.defined())
    return os << "quantized_tensor(undefined)";
  std::string values = q.dequantize().str();
  values.pop_back(); // the closing parenthesis
  std::string size = "(";
  for (size_t i = 0; i < q.sizes().size(); ++i)
    size += (i ? ", " : "") + std::to_string(q.sizes()[i]);
  size += q.sizes().size() == 1 ? ",)" : ")";
  return os << values << ", size=" << size << ", dtype=torch." << qdtype_name(q.dtype())
            << ",\n       quantization_scheme=torch.per_tensor_affine, scale="
            << py_float(q.q_scale()) << ", zero_point=" << q.q_zero_point() << ')';
}

} // namespace actorch
