// Elementwise ops: values computed by hand, broadcasting and stride edge cases, PyTorch's type
// promotion, in-place rules and the errors they raise.
#include <cmath>

#include <catch2/catch.hpp>

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("arithmetic matches hand-computed values", "[core][elementwise]") {
  tensor a = tensor_of({1.0, 2.0, 3.0});
  tensor b = tensor_of({4.0, -5.0, 0.5});
  CHECK(values_of(a + b) == std::vector<double>{5, -3, 3.5});
  CHECK(values_of(a - b) == std::vector<double>{-3, 7, 2.5});
  CHECK(values_of(a * b) == std::vector<double>{4, -10, 1.5});
  CHECK(values_of(a / b) == std::vector<double>{0.25, -0.4f, 6});
  CHECK(values_of(add(a, b, 2)) == std::vector<double>{9, -8, 4});
  CHECK(values_of(sub(a, b, 0.5)) == std::vector<double>{-1, 4.5, 2.75});
  CHECK(values_of(pow(a, 2)) == std::vector<double>{1, 4, 9});
  CHECK(values_of(pow(b, a)) == std::vector<double>{4, 25, 0.125});
  CHECK(values_of(-a) == std::vector<double>{-1, -2, -3});
  CHECK(values_of(2 - a) == std::vector<double>{1, 0, -1});
  CHECK(values_of(6 / a) == std::vector<double>{6, 3, 2});
  CHECK(values_of(maximum(a, b)) == std::vector<double>{4, 2, 3});
  CHECK(values_of(minimum(a, b)) == std::vector<double>{1, -5, 0.5});
}

TEST_CASE("unary math matches the C library", "[core][elementwise]") {
  tensor x = tensor_of({-2.0, -0.5, 0.0, 1.5}, {.dtype = dtype::float64});
  CHECK(values_of(abs(x)) == std::vector<double>{2, 0.5, 0, 1.5});
  CHECK(values_of(relu(x)) == std::vector<double>{0, 0, 0, 1.5});
  CHECK(close(values_of(exp(x)), {std::exp(-2.0), std::exp(-0.5), 1, std::exp(1.5)}, 1e-15));
  CHECK(close(values_of(tanh(x)), {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(1.5)}, 1e-15));
  CHECK(close(values_of(sigmoid(x)),
              {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 0.5, 1 / (1 + std::exp(-1.5))},
              1e-15));
  CHECK(values_of(clamp(x, -1.0, 1.0)) == std::vector<double>{-1, -0.5, 0, 1});
  CHECK(values_of(x.clamp_min(0.0)) == std::vector<double>{0, 0, 0, 1.5});
  CHECK(values_of(x.clamp_max(-1)) == std::vector<double>{-2, -1, -1, -1});
  tensor y = tensor_of({4.0, 1.0});
  CHECK(values_of(sqrt(y)) == std::vector<double>{2, 1});
  CHECK(values_of(log(y)) == std::vector<double>{std::log(4.0f), 0});
  CHECK(std::isnan(values_of(log(tensor_of({-1.0})))[0]));
  CHECK(std::isnan(values_of(clamp(tensor_of({NAN}), 0, 1))[0]));
}

TEST_CASE("comparisons and where give bool masks", "[core][elementwise]") {
  tensor a = tensor_of({1, 2, 3});
  tensor b = tensor_of({3, 2, 1});
  CHECK(lt(a, b).dtype() == dtype::bool_);
  CHECK(values_of(lt(a, b)) == std::vector<double>{1, 0, 0});
  CHECK(values_of(le(a, b)) == std::vector<double>{1, 1, 0});
  CHECK(values_of(gt(a, b)) == std::vector<double>{0, 0, 1});
  CHECK(values_of(ge(a, b)) == std::vector<double>{0, 1, 1});
  CHECK(values_of(eq(a, b)) == std::vector<double>{0, 1, 0});
  CHECK(values_of(ne(a, b)) == std::vector<double>{1, 0, 1});
  CHECK(values_of(a.gt(1.5)) == std::vector<double>{0, 1, 1});
  CHECK(values_of(where(a.gt(1), a, b)) == std::vector<double>{3, 2, 3});
  tensor w = where(a.gt(1), a, 0.5);
  CHECK(w.dtype() == dtype::float32);
  CHECK(values_of(w) == std::vector<double>{0.5, 2, 3});
  REQUIRE_THROWS_WITH(where(a, a, b), Contains("where: expected a bool condition but got int64"));
}

TEST_CASE("where picks each element from the right operand on every layout and dtype",
          "[core][elementwise]") {
  generator gen(11);
  const tensor cond = rand({6, 37}, {}, &gen).gt(0.5); // rows longer than a vector
  const std::vector<double> c = values_of(cond);
  for (dtype t : {dtype::float32, dtype::float64, dtype::int64, dtype::uint8}) {
    INFO("dtype " << dtype_name(t));
    const tensor a = arange(6 * 37).view({6, 37}).to(t);
    const tensor b = arange(6 * 37).view({6, 37}).mul(2).add(1).to(t);
    const std::vector<double> va = values_of(a), vb = values_of(b);
    auto expected = [&](const std::vector<double>& x, const std::vector<double>& y,
                        const std::vector<double>& cs) {
      std::vector<double> out;
      for (size_t i = 0; i < cs.size(); ++i)
        out.push_back(cs[i] != 0 ? x[i] : y[i]);
      return out;
    };
    CHECK(values_of(where(cond, a, b)) == expected(va, vb, c)); // contiguous
    CHECK(values_of(where(cond, a, scalar(7))) ==
          expected(va, std::vector<double>(va.size(), 7), c)); // a scalar other
    // Transposed operands and condition: strided rows.
    const tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
    const tensor ct = cond.t().contiguous().t();
    CHECK(values_of(where(ct, at, bt)) == expected(va, vb, c));
    // A condition broadcast over rows.
    const tensor row = cond.narrow(0, 0, 1);
    std::vector<double> cr;
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t k = 0; k < 37; ++k)
        cr.push_back(c[size_t(k)]);
    CHECK(values_of(where(row, a, b)) == expected(va, vb, cr));
  }
}

TEST_CASE("broadcasting follows numpy's rules", "[core][elementwise]") {
  tensor col = arange(3).view({3, 1});
  tensor row = arange(4).mul(10);
  tensor s = col + row;
  CHECK(s.sizes() == shape_t{3, 4});
  CHECK(values_of(s) == std::vector<double>{0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32});
  CHECK((zeros({2, 1, 3}) + zeros({4, 1})).sizes() == shape_t{2, 4, 3});
  CHECK((zeros({0, 3}) + zeros({3})).sizes() == shape_t{0, 3});
  CHECK((scalar_tensor(1.0) + scalar_tensor(2.0)).dim() == 0);
  REQUIRE_THROWS_WITH(
      zeros({2, 3}) + zeros({4}),
      Contains("add: shapes [2, 3] and [4] cannot be broadcast together (dim -1: 3 vs 4)"));
  REQUIRE_THROWS_WITH(mul(zeros({2, 3}), zeros({3, 2})), Contains("mul: shapes [2, 3] and [3, 2]"));
}

TEST_CASE("non-contiguous inputs give the same values as contiguous ones", "[core][elementwise]") {
  tensor m = arange(12, {.dtype = dtype::float32}).view({3, 4});
  tensor t = m.t();                     // strides [1, 4]
  tensor stepped = m.slice(1, 0, 4, 2); // strides [4, 2]
  CHECK(values_of(t + t) == values_of(t.contiguous() * 2));
  CHECK(values_of(stepped * stepped) == std::vector<double>{0, 4, 16, 36, 64, 100});
  CHECK(values_of(m.select(1, 1).exp()) == values_of(tensor_of({1.0, 5.0, 9.0}).exp()));
}

TEST_CASE("type promotion follows torch.result_type", "[core][elementwise]") {
  tensor i32 = tensor_of({1, 2}, {.dtype = dtype::int32});
  tensor u8 = tensor_of({1, 2}, {.dtype = dtype::uint8});
  tensor f16 = tensor_of({1.0, 2.0}, {.dtype = dtype::float16});
  CHECK((i32 + 2).dtype() == dtype::int32);     // int number keeps the tensor's type
  CHECK((i32 + 2.5).dtype() == dtype::float32); // float number: default float
  CHECK((u8 + 300).dtype() == dtype::uint8);
  CHECK((f16 * 2.5).dtype() == dtype::float16);
  CHECK((i32 + scalar_tensor(int64_t(1))).dtype() == dtype::int32); // 0-dim of the same category
  CHECK((i32 + scalar_tensor(1.0, {.dtype = dtype::float64})).dtype() == dtype::float64);
  CHECK((f16 + scalar_tensor(1.0, {.dtype = dtype::float64})).dtype() == dtype::float16);
  CHECK((i32 + u8).dtype() == dtype::int32);
  CHECK((u8 + tensor_of({1}, {.dtype = dtype::int8})).dtype() == dtype::int16);
  CHECK((tensor_of({true}) + 1).dtype() == dtype::int64);
  CHECK((i32 / i32).dtype() == dtype::float32); // true division
  CHECK(values_of(i32 / tensor_of({2, 4}, {.dtype = dtype::int32})) ==
        std::vector<double>{0.5, 0.5});
  CHECK((f16 + zeros({2}, {.dtype = dtype::bfloat16})).dtype() == dtype::float32);
}

TEST_CASE("integer arithmetic wraps and rejects negative powers", "[core][elementwise]") {
  tensor big = tensor_of({int64_t(INT32_MAX)}, {.dtype = dtype::int32});
  CHECK((big + 1).item<int64_t>() == INT32_MIN);
  CHECK((tensor_of({250}, {.dtype = dtype::uint8}) + 10).item<int>() == 4);
  CHECK(values_of(pow(tensor_of({2, 3}), 3)) == std::vector<double>{8, 27});
  REQUIRE_THROWS_WITH(pow(tensor_of({2}), -1),
                      Contains("integers to negative integer powers are not allowed"));
  CHECK(values_of(abs(tensor_of({-3, 4}, {.dtype = dtype::int8}))) == std::vector<double>{3, 4});
}

TEST_CASE("bool and float16 arithmetic", "[core][elementwise]") {
  tensor t = tensor_of({true, false});
  CHECK(values_of(t + tensor_of({false, false})) == std::vector<double>{1, 0});
  CHECK((t * t).dtype() == dtype::bool_);
  REQUIRE_THROWS_WITH(t - t, Contains("subtraction of bool tensors is not supported"));
  REQUIRE_THROWS_WITH(neg(t), Contains("neg: bool tensors are not supported"));
  tensor h = tensor_of({1.0, 0.1}, {.dtype = dtype::float16});
  // 0.1 in float16 is 0.0999755859375; 3 * that rounds to 0.2998046875 in float16.
  CHECK(values_of(h * 3) == std::vector<double>{3, 0.2998046875});
  tensor bf = tensor_of({1.0, 3.0}, {.dtype = dtype::bfloat16});
  CHECK(values_of(bf / 3) == std::vector<double>{0.333984375, 1});
}

TEST_CASE("in-place ops write through views and check their output type", "[core][elementwise]") {
  tensor a = zeros({2, 3});
  a.select(0, 1).add_(tensor_of({1.0, 2.0, 3.0}));
  a.mul_(2).sub_(1);
  CHECK(values_of(a) == std::vector<double>{-1, -1, -1, 1, 3, 5});
  a += ones({3});
  a /= 2;
  CHECK(values_of(a) == std::vector<double>{0, 0, 0, 1, 2, 3});
  a.relu_().sqrt_();
  CHECK(values_of(a) ==
        values_of(tensor_of({0.0, 0.0, 0.0, 1.0, std::sqrt(2.0), std::sqrt(3.0)}).view({2, 3})));

  tensor i = tensor_of({1, 2, 3});
  i.add_(1).mul_(tensor_of({2}));
  CHECK(values_of(i) == std::vector<double>{4, 6, 8});
  REQUIRE_THROWS_WITH(
      i.add_(0.5),
      Contains("add: result type float32 can't be cast to the desired output type int64"));
  REQUIRE_THROWS_WITH(i.div_(2), Contains("div: result type float32 can't be cast"));
  REQUIRE_THROWS_WITH(i.exp_(), Contains("exp_: result type float32 can't be cast"));
  REQUIRE_THROWS_WITH(
      zeros({3}).add_(zeros({2, 3})),
      Contains("add_: the result's shape [2, 3] differs from the in-place target's shape [3]"));
  SECTION("an input overlapping the output through another layout is read before written") {
    tensor v = arange(4, {.dtype = dtype::float32}).view({2, 2});
    v.add_(v.t()); // [[0,1],[2,3]] + [[0,2],[1,3]]
    CHECK(values_of(v) == std::vector<double>{0, 3, 3, 6});
  }
}

TEST_CASE("the combine kernels of collectives match the binary ops, NaN from either side",
          "[core][elementwise]") {
  namespace kc = actorch::kernels::cpu;
  const double nan = std::nan("");
  const std::vector<double> a{1, nan, 3, nan, -2}, b{nan, 2, 1, nan, 5};
  for (dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16}) {
    INFO(dtype_name(dt));
    tensor ta = as_tensor(a).to(dt), tb = as_tensor(b).to(dt);
    for (auto [op, want] : {std::pair{kc::combine_op::max, maximum(ta, tb)},
                            std::pair{kc::combine_op::min, minimum(ta, tb)}}) {
      tensor got = ta.clone();
      kc::combine(op, dt)(got.data_ptr(), got.data_ptr(), tb.data_ptr(), size_t(got.numel()));
      const auto g = values_of(got), w = values_of(want);
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("element " << i);
        CHECK(std::isnan(g[i]) == std::isnan(w[i]));
        if (!std::isnan(w[i]))
          CHECK(g[i] == w[i]);
      }
      CHECK(std::isnan(g[0])); // NaN only in b
      CHECK(std::isnan(g[1])); // NaN only in a
    }
  }
  // Integers wrap; bool sums are OR and products AND.
  tensor i8 = tensor_of({100.0, -100.0}).to(dtype::int8), j8 = i8.clone();
  kc::combine(kc::combine_op::sum, dtype::int8)(i8.data_ptr(), i8.data_ptr(), j8.data_ptr(), 2);
  CHECK(values_of(i8) == std::vector<double>{-56, 56});
  tensor p = tensor_of({1.0, 0.0, 1.0, 0.0}).to(dtype::bool_);
  tensor q = tensor_of({1.0, 1.0, 0.0, 0.0}).to(dtype::bool_);
  tensor o = empty({4}, {.dtype = dtype::bool_});
  kc::combine(kc::combine_op::sum, dtype::bool_)(o.data_ptr(), p.data_ptr(), q.data_ptr(), 4);
  CHECK(values_of(o) == std::vector<double>{1, 1, 1, 0});
  kc::combine(kc::combine_op::product, dtype::bool_)(o.data_ptr(), p.data_ptr(), q.data_ptr(), 4);
  CHECK(values_of(o) == std::vector<double>{1, 0, 0, 0});
  CHECK_THROWS_WITH(kc::combine(kc::combine_op::bxor, dtype::float32),
                    Contains("bxor is not defined for float32"));
}
