// quantize_per_tensor, dequantize, int_repr, q_scale, q_zero_point: hand-computed codes for each
// quantized dtype (round half to even, saturation at both ends, infinities), dequantized values,
// non-contiguous input, PyTorch's printing, and the errors.
#include <limits>
#include <sstream>

#include <catch2/catch.hpp>

#include "core/ops/factory.hpp"
#include "core/ops/quantize.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
using codes = std::vector<int64_t>;
} // namespace

TEST_CASE("quantize_per_tensor rounds half to even", "[core][quantize]") {
  // scale 0.5: x / scale = 0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, exactly; half to even gives
  // 0, 2, 2, 4, 0, -2, -2 (round-half-away would give 1, 2, 3, 4, -1, -2, -3).
  const tensor x = tensor_of({0.25, 0.75, 1.25, 1.75, -0.25, -0.75, -1.25});
  const quantized_tensor q = quantize_per_tensor(x, 0.5, 0, qdtype::qint8);
  CHECK(ints_of(q.int_repr()) == codes{0, 2, 2, 4, 0, -2, -2});
  // Not a tie: 0.3 / 0.5 = 0.6 -> 1, 0.2 / 0.5 = 0.4 -> 0.
  CHECK(ints_of(int_repr(quantize_per_tensor(tensor_of({0.3, 0.2, -0.3}), 0.5, 0,
                                             qdtype::qint8))) == codes{1, 0, -1});
  // Ties through a float product, as PyTorch computes x * float(1 / scale): with scale 0.1,
  // float(1 / 0.1) = 10 and -0.25f * 10, 0.15f * 10, 0.35f * 10 round (in float) to -2.5, 1.5
  // and 3.5 exactly, so the codes are -2, 2, 4 (torch 1.13 gives the same).
  CHECK(ints_of(int_repr(quantize_per_tensor(tensor_of({-0.25, 0.15, 0.35}), 0.1, 0,
                                             qdtype::qint8))) == codes{-2, 2, 4});
}

TEST_CASE("quantize_per_tensor adds the zero point and saturates to each dtype's range",
          "[core][quantize]") {
  const tensor x = tensor_of({-1.0, 0.0, 1.0, 12.7, 12.8, 100.0, -12.8, -12.9, kInf, -kInf});
  SECTION("qint8: [-128, 127]") {
    const quantized_tensor q = quantize_per_tensor(x, 0.1, 0, qdtype::qint8);
    CHECK(q.dtype() == qdtype::qint8);
    CHECK(q.int_repr().dtype() == dtype::int8);
    // 12.7 / 0.1 = 127 (fits), 12.8 -> 128 saturates to 127, -12.8 -> -128 fits, -12.9 -> -129
    // saturates to -128; the infinities saturate.
    CHECK(ints_of(q.int_repr()) == codes{-10, 0, 10, 127, 127, 127, -128, -128, 127, -128});
  }
  SECTION("quint8 with zero point 3: [0, 255]") {
    const quantized_tensor q = quantize_per_tensor(x, 0.1, 3, qdtype::quint8);
    CHECK(q.int_repr().dtype() == dtype::uint8);
    // -10 + 3 = -7 -> 0; 0 + 3; 10 + 3; 127 + 3; 128 + 3; 1000 + 3 -> 255; negatives -> 0.
    CHECK(ints_of(q.int_repr()) == codes{0, 3, 13, 130, 131, 255, 0, 0, 255, 0});
  }
  SECTION("qint32 with zero point -5: the whole int32 range") {
    const tensor big = tensor_of({2.0, -1e10, 1e10, 1e30, 100.0});
    const quantized_tensor q = quantize_per_tensor(big, 0.5, -5, qdtype::qint32);
    CHECK(q.int_repr().dtype() == dtype::int32);
    CHECK(ints_of(q.int_repr()) == codes{-1, std::numeric_limits<int32_t>::min(),
                                         std::numeric_limits<int32_t>::max(),
                                         std::numeric_limits<int32_t>::max(), 195});
  }
  SECTION("a zero point at the edge of the range") {
    CHECK(ints_of(quantize_per_tensor(tensor_of({0.0, 1.0, -1.0}), 1.0, 127, qdtype::qint8)
                      .int_repr()) == codes{127, 127, 126});
    CHECK(ints_of(quantize_per_tensor(tensor_of({0.0, 1.0, -1.0}), 1.0, 255, qdtype::quint8)
                      .int_repr()) == codes{255, 255, 254});
  }
}

TEST_CASE("dequantize maps codes back to (q - zero_point) * scale", "[core][quantize]") {
  const tensor x = tensor_of({-1.0, 0.26, 3.0, 100.0});
  const quantized_tensor q = quantize_per_tensor(x, 0.5, 1, qdtype::quint8);
  // codes: -2 + 1 -> 0 (clamped), 0.52 -> 1, +1 = 2, 6 + 1 = 7, 200 + 1 = 201.
  CHECK(ints_of(q.int_repr()) == codes{0, 2, 7, 201});
  const tensor d = dequantize(q);
  CHECK(d.dtype() == dtype::float32);
  CHECK(values_of(d) == std::vector<double>{-0.5, 0.5, 3.0, 100.0});
  CHECK(q_scale(q) == 0.5);
  CHECK(q_zero_point(q) == 1);
  CHECK(q.sizes() == shape_t{4});

  SECTION("the dequantized values of a saturated qint8") {
    const quantized_tensor s =
        quantize_per_tensor(tensor_of({1000.0, -1000.0}), 0.25, -3, qdtype::qint8);
    CHECK(values_of(s.dequantize()) == std::vector<double>{(127 + 3) * 0.25, (-128 + 3) * 0.25});
  }
  SECTION("qint32 codes far from zero") {
    const quantized_tensor s = quantize_per_tensor(tensor_of({1e10}), 1.0, 0, qdtype::qint32);
    CHECK(values_of(s.dequantize()) == std::vector<double>{double(float(2147483647.0))});
  }
}

TEST_CASE("quantize_per_tensor keeps the shape of a non-contiguous input", "[core][quantize]") {
  const tensor x = tensor_of({1.0, 2.0, 3.0, 4.0}).view({2, 2}).t(); // [[1, 3], [2, 4]]
  const quantized_tensor q = quantize_per_tensor(x, 0.5, 1, qdtype::quint8);
  CHECK(q.sizes() == shape_t{2, 2});
  CHECK(q.int_repr().is_contiguous());
  CHECK(ints_of(q.int_repr()) == codes{3, 7, 5, 9});
  SECTION("int_repr is a copy, as PyTorch's") {
    tensor r = q.int_repr();
    r.fill_(0);
    CHECK(ints_of(q.int_repr()) == codes{3, 7, 5, 9});
  }
}

TEST_CASE("a quantized tensor prints as PyTorch prints it", "[core][quantize]") {
  std::ostringstream os;
  os << quantize_per_tensor(tensor_of({-1.0, 0.5, 3.0, 100.0}).view({2, 2}), 0.5, 1,
                            qdtype::quint8);
  CHECK(os.str() == "tensor([[ -0.5000,   0.5000],\n"
                    "        [  3.0000, 100.0000]], size=(2, 2), dtype=torch.quint8,\n"
                    "       quantization_scheme=torch.per_tensor_affine, scale=0.5, "
                    "zero_point=1)");
  std::ostringstream os2;
  os2 << quantize_per_tensor(tensor_of({2.0}), 1.0, 0, qdtype::qint32);
  CHECK(os2.str() == "tensor([2.], size=(1,), dtype=torch.qint32,\n"
                     "       quantization_scheme=torch.per_tensor_affine, scale=1.0, "
                     "zero_point=0)");
}

TEST_CASE("quantize_per_tensor refuses bad input, naming the value", "[core][quantize]") {
  const tensor x = tensor_of({1.0, 2.0});
  CHECK_THROWS_WITH(quantize_per_tensor(x, 0.0, 0, qdtype::qint8),
                    Contains("scale must be a positive finite number but got 0"));
  CHECK_THROWS_WITH(quantize_per_tensor(x, -0.5, 0, qdtype::qint8), Contains("but got -0.5"));
  CHECK_THROWS_WITH(
      quantize_per_tensor(x, std::numeric_limits<double>::quiet_NaN(), 0, qdtype::qint8),
      Contains("positive finite number"));
  CHECK_THROWS_WITH(quantize_per_tensor(x, 1e-50, 0, qdtype::qint8),
                    Contains("1 / scale overflows float32"));
  CHECK_THROWS_WITH(quantize_per_tensor(x, 0.1, 128, qdtype::qint8),
                    Contains("zero_point 128 is outside the range of qint8 [-128, 127]"));
  CHECK_THROWS_WITH(quantize_per_tensor(x, 0.1, -1, qdtype::quint8),
                    Contains("zero_point -1 is outside the range of quint8 [0, 255]"));
  CHECK_THROWS_WITH(quantize_per_tensor(x, 0.1, int64_t(1) << 31, qdtype::qint32),
                    Contains("zero_point 2147483648 is outside the range of qint32"));
  CHECK_THROWS_WITH(quantize_per_tensor(x.to(dtype::float64), 0.1, 0, qdtype::qint8),
                    Contains("expected a float32 input but got float64"));
  CHECK_THROWS_WITH(quantize_per_tensor(tensor_of({int64_t(1)}), 0.1, 0, qdtype::qint8),
                    Contains("expected a float32 input but got int64"));
  CHECK_THROWS_WITH(quantized_tensor(tensor_of({int64_t(1)}), 0.1, 0, qdtype::qint8),
                    Contains("qint8 codes must be int8 but got int64"));
  CHECK_THROWS_WITH(quantized_tensor().dequantize(), Contains("undefined"));
}
