// Tests of tensor::str() (core/print.cpp) against the exact strings PyTorch's repr prints for
// the same tensors: value styles, widths, suffixes, line wrapping and summarisation.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "core/ops/factory.hpp"

using namespace actorch;

namespace {
const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
} // namespace

TEST_CASE("str prints floats as PyTorch does", "[core][print]") {
  SECTION("integer values print with a trailing point") {
    CHECK(tensor_of({{1., 2.}, {3., 4.}}).str() == "tensor([[1., 2.],\n        [3., 4.]])");
    CHECK(tensor_of({-1., 2.}).str() == "tensor([-1.,  2.])");
  }
  SECTION("other values print with four decimals") {
    CHECK(tensor_of({0.5, 1.25}).str() == "tensor([0.5000, 1.2500])");
    CHECK(tensor_of({0.0, -0.5}).str() == "tensor([ 0.0000, -0.5000])");
  }
  SECTION("a 0-dim tensor prints its value without brackets") {
    CHECK(scalar_tensor(3.5).str() == "tensor(3.5000)");
    CHECK(scalar_tensor(7).str() == "tensor(7)");
    CHECK(scalar_tensor(true).str() == "tensor(True)");
  }
  SECTION("scientific notation for small values and wide ranges") {
    CHECK(tensor_of({1e-5, 1.0}).str() == "tensor([1.0000e-05, 1.0000e+00])");
    CHECK(tensor_of({1.5, 2e9}).str() == "tensor([1.5000e+00, 2.0000e+09])");
    // Integer values too: a max/min ratio over 1000 switches them to scientific notation.
    CHECK(tensor_of({1., 2000.}).str() == "tensor([1.0000e+00, 2.0000e+03])");
    CHECK(tensor_of({1., 1000.}).str() == "tensor([   1., 1000.])");
  }
  SECTION("nan and inf do not widen the columns") {
    CHECK(tensor_of({1., kNan, kInf, -kInf}).str() == "tensor([1., nan, inf, -inf])");
    CHECK(tensor_of({0.5, kNan}).str() == "tensor([0.5000,    nan])");
    CHECK(tensor_of({kNan, -kInf}).str() == "tensor([nan, -inf])");
    CHECK(tensor_of({1e-5, kNan}).str() == "tensor([1.0000e-05,        nan])");
  }
  SECTION("non-default float dtypes get a suffix") {
    CHECK(tensor_of({1.5, 2.0}, {.dtype = dtype::float64}).str() ==
          "tensor([1.5000, 2.0000], dtype=torch.float64)");
    CHECK(tensor_of({1.5, 2.0}, {.dtype = dtype::float16}).str() ==
          "tensor([1.5000, 2.0000], dtype=torch.float16)");
  }
  SECTION("a suffix that would pass column 80 goes on its own line") {
    std::vector<double> v;
    for (int i = 0; i < 8; ++i)
      v.push_back(i + 0.5);
    CHECK(as_tensor(v).str() ==
          "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000, 6.5000, 7.5000],\n"
          "       dtype=torch.float64)");
    v.resize(6);
    CHECK(as_tensor(v).str() ==
          "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000], dtype=torch.float64)");
  }
  SECTION("a non-contiguous view prints in its own order") {
    CHECK(tensor_of({{1., 2.}, {3., 4.}}).t().str() == "tensor([[1., 3.],\n        [2., 4.]])");
  }
}

TEST_CASE("str prints integers and bools as PyTorch does", "[core][print]") {
  CHECK(tensor_of({1, 2, 3}).str() == "tensor([1, 2, 3])");
  CHECK(tensor_of({1, 2, 3}, {.dtype = dtype::int32}).str() ==
        "tensor([1, 2, 3], dtype=torch.int32)");
  CHECK(tensor_of({-1, 10}, {.dtype = dtype::int8}).str() == "tensor([-1, 10], dtype=torch.int8)");
  CHECK(tensor_of({7, 200}, {.dtype = dtype::uint8}).str() ==
        "tensor([  7, 200], dtype=torch.uint8)");
  // int64 prints exactly, also beyond 2^53 where a double would round.
  CHECK(tensor_of<int64_t>({INT64_MIN, INT64_MAX}).str() ==
        "tensor([-9223372036854775808,  9223372036854775807])");
  // Bools are right-aligned to the width of "False".
  CHECK(tensor_of({true, false}).str() == "tensor([ True, False])");
}

TEST_CASE("str prints empty tensors with their size and dtype", "[core][print]") {
  CHECK(empty({0, 3}).str() == "tensor([], size=(0, 3))");
  CHECK(empty({0}).str() == "tensor([])");
  // An empty tensor has no values to infer int64 or bool from, so those are named too.
  CHECK(empty({0}, {.dtype = dtype::int64}).str() == "tensor([], dtype=torch.int64)");
  CHECK(empty({2, 0}, {.dtype = dtype::bool_}).str() ==
        "tensor([], size=(2, 0), dtype=torch.bool)");
}

TEST_CASE("str separates the matrices of a 3-D tensor with a blank line", "[core][print]") {
  CHECK(arange(8.).view({2, 2, 2}).str() == "tensor([[[0., 1.],\n"
                                            "         [2., 3.]],\n"
                                            "\n"
                                            "        [[4., 5.],\n"
                                            "         [6., 7.]]])");
}

TEST_CASE("str wraps long rows at 80 columns", "[core][print]") {
  std::vector<float> v;
  for (int i = 0; i < 12; ++i)
    v.push_back(float(i) + 0.5f);
  CHECK(as_tensor(v).str() ==
        "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
        "         8.5000,  9.5000, 10.5000, 11.5000])");
  std::vector<float> m;
  for (int i = 1; i <= 20; ++i)
    m.push_back(float(i) * 0.0625f);
  CHECK(as_tensor(m, {2, 10}).str() ==
        "tensor([[0.0625, 0.1250, 0.1875, 0.2500, 0.3125, 0.3750, 0.4375, 0.5000, 0.5625,\n"
        "         0.6250],\n"
        "        [0.6875, 0.7500, 0.8125, 0.8750, 0.9375, 1.0000, 1.0625, 1.1250, 1.1875,\n"
        "         1.2500]])");
}

TEST_CASE("str summarises tensors over 1000 elements with an ellipsis", "[core][print]") {
  CHECK(arange(2000.).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03])");
  CHECK(arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(arange(2000).view({1000, 2}).str() == "tensor([[   0,    1],\n"
                                              "        [   2,    3],\n"
                                              "        [   4,    5],\n"
                                              "        ...,\n"
                                              "        [1994, 1995],\n"
                                              "        [1996, 1997],\n"
                                              "        [1998, 1999]])");
}

TEST_CASE("operator<< prints str()", "[core][print]") {
  std::ostringstream os;
  os << tensor_of({1, 2});
  CHECK(os.str() == "tensor([1, 2])");
}

TEST_CASE("str shows requires_grad on a leaf and the grad_fn of an op's result",
          "[core][print][autograd]") {
  const tensor x = tensor_of({1.0, 2.0}, {.requires_grad = true});
  CHECK(x.str() == "tensor([1., 2.], requires_grad=True)");
  CHECK((x * 2).str() == "tensor([2., 4.], grad_fn=<MulBackward0>)");
  CHECK(x.sum().str() == "tensor(3., grad_fn=<SumBackward0>)");
  CHECK(x.exp().str() == "tensor([2.7183, 7.3891], grad_fn=<ExpBackward0>)");
  CHECK(x.to(dtype::float64).str() ==
        "tensor([1., 2.], dtype=torch.float64, grad_fn=<ToCopyBackward0>)");
  CHECK(x.detach().str() == "tensor([1., 2.])");
}

TEST_CASE("str prints int16 with its dtype", "[core][print]") {
  CHECK(tensor_of({-32768, 7}, {.dtype = dtype::int16}).str() ==
        "tensor([-32768,      7], dtype=torch.int16)");
}
