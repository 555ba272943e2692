// Reductions: values computed by hand for every op, dims (negative, lists, keepdim), both
// kernel layouts and the copy fallback (transposed, stepped, expanded inputs), empty and 0-dim
// tensors, integer/bool/16-bit dtypes, NaN propagation, and the errors they raise.
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "core/ops/factory.hpp"
#include "core/ops/reduce.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool all_nan(const tensor& t) {
  for (double v : values_of(t))
    if (!std::isnan(v))
      return false;
  return true;
}
// [[0, 1, 2], [3, 4, 5]] as float32.
tensor x23() {
  return arange(6, {.dtype = dtype::float32}).view({2, 3});
}
} // namespace

TEST_CASE("sum and mean match hand-computed values over each dim", "[core][reduce]") {
  const tensor x = x23();
  CHECK(x.sum().dim() == 0);
  CHECK(x.sum().dtype() == dtype::float32);
  CHECK(values_of(x.sum()) == std::vector<double>{15});
  CHECK(values_of(sum(x, {0})) == std::vector<double>{3, 5, 7});
  CHECK(values_of(sum(x, {1})) == std::vector<double>{3, 12});
  CHECK(values_of(sum(x, {0, 1})) == std::vector<double>{15});
  CHECK(values_of(mean(x)) == std::vector<double>{2.5});
  CHECK(values_of(x.mean({0})) == std::vector<double>{1.5, 2.5, 3.5});
  CHECK(values_of(x.mean({1})) == std::vector<double>{1, 4});

  SECTION("an empty dim list reduces every dim") {
    CHECK(sum(x, {}).sizes() == shape_t{});
    CHECK(values_of(sum(x, {})) == std::vector<double>{15});
    CHECK(sum(x, {}, true).sizes() == shape_t{1, 1});
  }
  SECTION("negative dims count from the end and keepdim leaves size-1 dims") {
    CHECK(sum(x, {-1}).sizes() == shape_t{2});
    CHECK(values_of(sum(x, {-1})) == std::vector<double>{3, 12});
    tensor k = x.sum({-1}, true);
    CHECK(k.sizes() == shape_t{2, 1});
    CHECK(values_of(k) == std::vector<double>{3, 12});
    CHECK(x.mean({-2}, true).sizes() == shape_t{1, 3});
    CHECK(values_of(x.mean({-2}, true)) == std::vector<double>{1.5, 2.5, 3.5});
  }
  SECTION("several dims of a 3-d tensor, in any order") {
    // y[i][j][k] = 12i + 4j + k
    const tensor y = arange(24).view({2, 3, 4});
    // sum over i and k: 8 * 4j + (0 + 12) * 4 + 2 * (0 + 1 + 2 + 3) = 60 + 32j
    CHECK(ints_of(sum(y, {0, 2})) == std::vector<int64_t>{60, 92, 124});
    CHECK(ints_of(sum(y, {-1, 0})) == std::vector<int64_t>{60, 92, 124});
    CHECK(sum(y, {0, 2}, true).sizes() == shape_t{1, 3, 1});
    // sum over j: 36i + 12 + 3k
    CHECK(ints_of(sum(y, {1})) == std::vector<int64_t>{12, 15, 18, 21, 48, 51, 54, 57});
    // mean over i: (0 + 12) / 2 + 4j + k
    const tensor yf = y.to(dtype::float64);
    CHECK(values_of(mean(yf, {0})) ==
          std::vector<double>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  }
}

TEST_CASE("sum keeps eight partial sums and accumulates floats in double", "[core][reduce]") {
  // 10 elements per row: one block of eight lanes plus a tail of two.
  const tensor x = arange(20, {.dtype = dtype::float32}).view({2, 10});
  CHECK(values_of(sum(x, {1})) == std::vector<double>{45, 145});
  CHECK(values_of(sum(arange(1000, {.dtype = dtype::float64}))) == std::vector<double>{499500});
  // Adding 1 to 2^24 in float32 rounds back to 2^24; a double accumulator keeps every 1.
  const tensor big = tensor_of({16777216.0, 1.0, 1.0, 1.0, 1.0});
  CHECK(values_of(sum(big)) == std::vector<double>{16777220});
  // float16 stops counting at 2048 when it accumulates in float16.
  const tensor h = ones({4096}, {.dtype = dtype::float16});
  CHECK(sum(h).dtype() == dtype::float16);
  CHECK(values_of(sum(h)) == std::vector<double>{4096});
  CHECK(values_of(mean(h)) == std::vector<double>{1});
}

TEST_CASE("sum of integers and bools gives int64", "[core][reduce]") {
  CHECK(sum(tensor_of({1, 2, 3})).dtype() == dtype::int64);
  CHECK(ints_of(sum(tensor_of({1, 2, 3}))) == std::vector<int64_t>{6});
  const tensor i32 = tensor_of({1, 2, 3}, {.dtype = dtype::int32});
  CHECK(sum(i32).dtype() == dtype::int64);
  const tensor u8 = tensor_of({200, 100}, {.dtype = dtype::uint8});
  CHECK(ints_of(sum(u8)) == std::vector<int64_t>{300});
  const tensor i8 = tensor_of({-100, -100}, {.dtype = dtype::int8});
  CHECK(ints_of(sum(i8)) == std::vector<int64_t>{-200});
  const tensor b = tensor_of({true, false, true});
  CHECK(sum(b).dtype() == dtype::int64);
  CHECK(ints_of(sum(b)) == std::vector<int64_t>{2});
  // Column layout: the sum over dim 0 of a (2, 2) bool matrix.
  const tensor bm = tensor_of({true, true, false, true}).view({2, 2});
  CHECK(ints_of(sum(bm, {0})) == std::vector<int64_t>{1, 2});
  // int64 sums wrap around as PyTorch's do (two's complement), without undefined behaviour.
  const int64_t top = std::numeric_limits<int64_t>::max();
  CHECK(ints_of(sum(tensor_of<int64_t>({top, 1}))) ==
        std::vector<int64_t>{std::numeric_limits<int64_t>::min()});
}

TEST_CASE("var and std use Bessel's correction unless told otherwise", "[core][reduce]") {
  const tensor x = x23();
  // All six: mean 2.5, squared deviations sum to 2 * (6.25 + 2.25 + 0.25) = 17.5.
  CHECK(close(values_of(x.var()), {3.5}));
  CHECK(close(values_of(var(x, false)), {17.5 / 6}));
  CHECK(close(values_of(x.std()), {std::sqrt(3.5)}));
  CHECK(close(values_of(actorch::std(x, false)), {std::sqrt(17.5 / 6)}));
  // Rows {0, 1, 2} and {3, 4, 5}: squared deviations sum to 2.
  CHECK(close(values_of(x.var(shape_t{1})), {1, 1}));
  CHECK(close(values_of(var(x, {1}, false)), {2.0 / 3, 2.0 / 3}));
  // Columns {0, 3}, {1, 4}, {2, 5}: squared deviations sum to 4.5.
  CHECK(close(values_of(var(x, {0})), {4.5, 4.5, 4.5}));
  CHECK(close(values_of(actorch::std(x, {0}, false)), {1.5, 1.5, 1.5}));
  CHECK(close(values_of(x.std(shape_t{0})), {std::sqrt(4.5), std::sqrt(4.5), std::sqrt(4.5)}));
  CHECK(x.var(shape_t{1}, true, true).sizes() == shape_t{2, 1});
  // A one-element braced list is a list of dims, not the bool `unbiased`.
  CHECK(x.var({1}).sizes() == shape_t{2});
  CHECK(close(values_of(x.std({0})), {std::sqrt(4.5), std::sqrt(4.5), std::sqrt(4.5)}));
  CHECK(close(values_of(actorch::std(x, {1})), {1, 1}));
  CHECK(x.std(shape_t{-2}, true, true).sizes() == shape_t{1, 3});

  SECTION("two passes keep a large offset from cancelling the variance") {
    const tensor t = tensor_of({1e9 + 1, 1e9 + 2, 1e9 + 3}, {.dtype = dtype::float64});
    CHECK(values_of(var(t)) == std::vector<double>{1});
  }
  SECTION("a single element has no unbiased variance") {
    CHECK(all_nan(var(tensor_of({4.0}))));
    CHECK(values_of(var(tensor_of({4.0}), false)) == std::vector<double>{0});
  }
  SECTION("float16 computes in double and rounds once") {
    const tensor h = tensor_of({1.0, 2.0, 3.0, 4.0}, {.dtype = dtype::float16});
    CHECK(var(h).dtype() == dtype::float16);
    CHECK(close(values_of(var(h)), {5.0 / 3}, 1e-3));
    CHECK(close(values_of(actorch::std(h)), {std::sqrt(5.0 / 3)}, 1e-3));
  }
}

TEST_CASE("max and min return values and the first index of the extreme", "[core][reduce]") {
  const tensor m = tensor_of({{3.0, 9.0, 2.0}, {7.0, 7.0, 1.0}});
  CHECK(values_of(m.max()) == std::vector<double>{9});
  CHECK(m.max().dim() == 0);
  CHECK(values_of(m.min()) == std::vector<double>{1});

  auto [v1, i1] = m.max(1);
  CHECK(values_of(v1) == std::vector<double>{9, 7});
  CHECK(i1.dtype() == dtype::int64);
  CHECK(ints_of(i1) == std::vector<int64_t>{1, 0}); // 7 appears twice: the first wins
  auto [v0, i0] = max(m, 0);                        // column layout
  CHECK(values_of(v0) == std::vector<double>{7, 9, 2});
  CHECK(ints_of(i0) == std::vector<int64_t>{1, 0, 0});
  auto [w1, j1] = m.min(-1);
  CHECK(values_of(w1) == std::vector<double>{2, 1});
  CHECK(ints_of(j1) == std::vector<int64_t>{2, 2});
  auto [w0, j0] = min(m, 0, true);
  CHECK(w0.sizes() == shape_t{1, 3});
  CHECK(j0.sizes() == shape_t{1, 3});
  CHECK(values_of(w0) == std::vector<double>{3, 7, 1});
  CHECK(ints_of(j0) == std::vector<int64_t>{0, 1, 1});

  SECTION("ties resolve to the first occurrence in the column layout too") {
    const tensor c = tensor_of({{5.0, 1.0}, {5.0, 2.0}, {4.0, 2.0}});
    auto [v, i] = max(c, 0);
    CHECK(values_of(v) == std::vector<double>{5, 2});
    CHECK(ints_of(i) == std::vector<int64_t>{0, 1});
    auto [w, j] = min(c, 0);
    CHECK(values_of(w) == std::vector<double>{4, 1});
    CHECK(ints_of(j) == std::vector<int64_t>{2, 0});
  }
  SECTION("amax and amin reduce several dims without indices") {
    CHECK(values_of(amax(m)) == std::vector<double>{9});
    CHECK(values_of(amax(m, {0})) == std::vector<double>{7, 9, 2});
    CHECK(values_of(amin(m, {1}, true)) == std::vector<double>{2, 1});
    CHECK(amin(m, {1}, true).sizes() == shape_t{2, 1});
    // y[i][j][k] = 12i + 4j + k: the max over i and k is 12 + 4j + 3.
    const tensor y = arange(24).view({2, 3, 4});
    CHECK(ints_of(amax(y, {0, -1})) == std::vector<int64_t>{15, 19, 23});
    CHECK(ints_of(amin(y, {0, -1})) == std::vector<int64_t>{0, 4, 8});
  }
  SECTION("integer, bool and float16 inputs keep their dtype") {
    const tensor i = tensor_of({3, 7, 7, 1});
    CHECK(max(i).dtype() == dtype::int64);
    CHECK(ints_of(max(i)) == std::vector<int64_t>{7});
    CHECK(ints_of(max(i, 0).indices) == std::vector<int64_t>{1});
    CHECK(ints_of(min(i)) == std::vector<int64_t>{1});
    const tensor b = tensor_of({false, true, false});
    CHECK(max(b).dtype() == dtype::bool_);
    CHECK(ints_of(max(b)) == std::vector<int64_t>{1});
    CHECK(ints_of(min(b)) == std::vector<int64_t>{0});
    const tensor h = tensor_of({1.5, -2.5, 0.5}, {.dtype = dtype::float16});
    CHECK(max(h).dtype() == dtype::float16);
    CHECK(values_of(max(h)) == std::vector<double>{1.5});
    CHECK(values_of(min(h)) == std::vector<double>{-2.5});
    CHECK(ints_of(argmin(h)) == std::vector<int64_t>{1});
  }
}

TEST_CASE("argmax and argmin index the flattened tensor or a dim", "[core][reduce]") {
  const tensor m = tensor_of({{3.0, 9.0, 2.0}, {7.0, 9.0, 1.0}});
  CHECK(m.argmax().dtype() == dtype::int64);
  CHECK(m.argmax().dim() == 0);
  CHECK(ints_of(m.argmax()) == std::vector<int64_t>{1});
  CHECK(ints_of(argmin(m)) == std::vector<int64_t>{5});
  CHECK(ints_of(m.argmax(1)) == std::vector<int64_t>{1, 1});
  CHECK(ints_of(argmax(m, 0)) == std::vector<int64_t>{1, 0, 0});
  CHECK(ints_of(argmin(m, -1)) == std::vector<int64_t>{2, 2});
  CHECK(m.argmax(1, true).sizes() == shape_t{2, 1});
  // Flat indices follow the logical order, not the memory order, of a transposed input:
  // m.t() = [[3, 7], [9, 9], [2, 1]], whose first 9 is at flat index 2.
  CHECK(ints_of(m.t().argmax()) == std::vector<int64_t>{2});
  CHECK(ints_of(argmin(m.t())) == std::vector<int64_t>{5});
}

TEST_CASE("NaN propagates through max, min and sum", "[core][reduce]") {
  const tensor t = tensor_of({1.0, kNaN, 3.0});
  CHECK(all_nan(t.max()));
  CHECK(all_nan(t.min()));
  CHECK(all_nan(amax(t)));
  CHECK(all_nan(sum(t)));
  CHECK(ints_of(t.max(0).indices) == std::vector<int64_t>{1});
  CHECK(ints_of(t.argmax()) == std::vector<int64_t>{1});
  CHECK(ints_of(argmin(t)) == std::vector<int64_t>{1});
  // A leading NaN is not replaced by larger numbers that follow.
  const tensor lead = tensor_of({kNaN, 5.0});
  CHECK(all_nan(max(lead)));
  CHECK(ints_of(argmax(lead)) == std::vector<int64_t>{0});

  SECTION("in the column layout, each column reports its first NaN") {
    const tensor c = tensor_of({{1.0, kNaN}, {kNaN, 2.0}, {3.0, kNaN}});
    auto [v, i] = max(c, 0);
    CHECK(all_nan(v));
    CHECK(ints_of(i) == std::vector<int64_t>{1, 0});
    CHECK(all_nan(amin(c, {0})));
    CHECK(all_nan(sum(c, {0})));
  }
}

TEST_CASE("non-contiguous inputs reduce in their logical order", "[core][reduce]") {
  SECTION("transposed") {
    const tensor t = x23().t(); // [[0, 3], [1, 4], [2, 5]]
    CHECK(values_of(sum(t, {0})) == std::vector<double>{3, 12});
    CHECK(values_of(sum(t, {1})) == std::vector<double>{3, 5, 7});
    CHECK(values_of(mean(t, {1})) == std::vector<double>{1.5, 2.5, 3.5});
    CHECK(close(values_of(var(t, {1})), {4.5, 4.5, 4.5}));
    auto [v, i] = max(t, 1);
    CHECK(values_of(v) == std::vector<double>{3, 4, 5});
    CHECK(ints_of(i) == std::vector<int64_t>{1, 1, 1});
    CHECK(ints_of(argmin(t, 0)) == std::vector<int64_t>{0, 0});
  }
  SECTION("permuted 3-d") {
    // y[i][j][k] = 12i + 4j + k seen as p[j][i][k]; summing p over dim 1 sums over i.
    const tensor p = arange(24).view({2, 3, 4}).permute({1, 0, 2});
    CHECK(ints_of(sum(p, {1})) ==
          std::vector<int64_t>{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
    // Summing p over dims 0 and 2 keeps i: 12i * 12 + (0 + 4 + 8) * 4 + 6 * 3 = 144i + 66.
    CHECK(ints_of(sum(p, {0, 2})) == std::vector<int64_t>{66, 210});
  }
  SECTION("sliced with a step") {
    // [[0, 2], [4, 6], [8, 10]]: neither layout is dense, so the input is copied first.
    const tensor s = arange(12).view({3, 4}).slice(1, 0, 4, 2);
    CHECK(ints_of(sum(s, {1})) == std::vector<int64_t>{2, 10, 18});
    CHECK(ints_of(sum(s, {0})) == std::vector<int64_t>{12, 18});
    CHECK(ints_of(s.sum()) == std::vector<int64_t>{30});
    CHECK(ints_of(s.max(0).values) == std::vector<int64_t>{8, 10});
    CHECK(ints_of(s.argmax()) == std::vector<int64_t>{5});
  }
  SECTION("expanded with stride 0") {
    const tensor e = tensor_of({1.0, 2.0, 3.0}).expand({4, 3});
    CHECK(values_of(sum(e, {0})) == std::vector<double>{4, 8, 12});
    CHECK(values_of(sum(e, {1})) == std::vector<double>{6, 6, 6, 6});
    CHECK(values_of(sum(e)) == std::vector<double>{24});
    CHECK(values_of(mean(e, {0})) == std::vector<double>{1, 2, 3});
    CHECK(values_of(var(e, {0})) == std::vector<double>{0, 0, 0});
    auto [v, i] = max(e, 0);
    CHECK(values_of(v) == std::vector<double>{1, 2, 3});
    CHECK(ints_of(i) == std::vector<int64_t>{0, 0, 0});
    const tensor col = tensor_of({1.0, 2.0}).view({2, 1}).expand({2, 3});
    CHECK(values_of(sum(col, {1})) == std::vector<double>{3, 6});
    CHECK(ints_of(argmax(col, 1)) == std::vector<int64_t>{0, 0});
  }
}

TEST_CASE("the bias-gradient shape sums a batch in the column layout", "[core][reduce]") {
  // g[b][c] = 10b + c for b < 4, c < 3: the sum over b is 60 + 4c.
  const tensor g = (arange(4, {.dtype = dtype::float32}).view({4, 1}) * 10.0 +
                    arange(3, {.dtype = dtype::float32}))
                       .contiguous();
  CHECK(values_of(sum(g, {0})) == std::vector<double>{60, 64, 68});
  CHECK(values_of(mean(g, {0})) == std::vector<double>{15, 16, 17});
}

TEST_CASE("zero-size reductions give the identity or nan", "[core][reduce]") {
  const tensor z = zeros({2, 0});
  CHECK(sum(z, {1}).sizes() == shape_t{2});
  CHECK(values_of(sum(z, {1})) == std::vector<double>{0, 0});
  CHECK(sum(z, {0}).sizes() == shape_t{0});
  CHECK(values_of(sum(z)) == std::vector<double>{0});
  CHECK(ints_of(sum(zeros({0}, {.dtype = dtype::int32}))) == std::vector<int64_t>{0});
  CHECK(all_nan(mean(z)));
  CHECK(mean(z, {1}).sizes() == shape_t{2});
  CHECK(all_nan(mean(z, {1})));
  CHECK(all_nan(var(z, {1})));
  CHECK(all_nan(actorch::std(z, {1}, false)));
  // Reducing a non-empty dim of an empty tensor is fine: nothing to compute.
  auto [v, i] = max(z, 0);
  CHECK(v.sizes() == shape_t{0});
  CHECK(i.sizes() == shape_t{0});
  CHECK(amax(z, {0}).sizes() == shape_t{0});
  CHECK(ints_of(any(z)) == std::vector<int64_t>{0});
  CHECK(ints_of(all(z)) == std::vector<int64_t>{1});
}

TEST_CASE("0-dim tensors reduce to 0-dim tensors", "[core][reduce]") {
  const tensor s = scalar_tensor(3.5);
  CHECK(sum(s).sizes() == shape_t{});
  CHECK(values_of(sum(s)) == std::vector<double>{3.5});
  CHECK(sum(s, {0}).sizes() == shape_t{});
  CHECK(sum(s, {-1}, true).sizes() == shape_t{});
  CHECK(values_of(mean(s, {0})) == std::vector<double>{3.5});
  CHECK(values_of(max(s)) == std::vector<double>{3.5});
  auto [v, i] = max(s, 0, true);
  CHECK(v.sizes() == shape_t{});
  CHECK(values_of(v) == std::vector<double>{3.5});
  CHECK(ints_of(i) == std::vector<int64_t>{0});
  CHECK(ints_of(argmax(s)) == std::vector<int64_t>{0});
  CHECK(all_nan(var(s)));
  CHECK(values_of(var(s, false)) == std::vector<double>{0});
  REQUIRE_THROWS_WITH(sum(s, {1}),
                      Contains("sum(): dim 1 is out of range for a tensor with 0 dims"));
}

TEST_CASE("any and all give bool tensors", "[core][reduce]") {
  const tensor t = tensor_of({0, 1, 0, 0}).view({2, 2}); // [[0, 1], [0, 0]]
  CHECK(any(t).dtype() == dtype::bool_);
  CHECK(ints_of(any(t)) == std::vector<int64_t>{1});
  CHECK(ints_of(all(t)) == std::vector<int64_t>{0});
  CHECK(ints_of(any(t, {1})) == std::vector<int64_t>{1, 0});
  CHECK(ints_of(any(t, {0})) == std::vector<int64_t>{0, 1});
  CHECK(ints_of(all(ones({2, 3}, {.dtype = dtype::bool_}), {0})) == std::vector<int64_t>{1, 1, 1});
  CHECK(ints_of(all(tensor_of({{1, 2}, {0, 3}}), {0})) == std::vector<int64_t>{0, 1});
  CHECK(ints_of(all(tensor_of({{1, 2}, {0, 3}}), {1}, true)) == std::vector<int64_t>{1, 0});
  // NaN is nonzero, as in PyTorch.
  CHECK(ints_of(any(tensor_of({0.0, kNaN}))) == std::vector<int64_t>{1});
  CHECK(ints_of(all(tensor_of({kNaN, 2.0}))) == std::vector<int64_t>{1});
}

TEST_CASE("reductions reject bad dims, dtypes and empty extremes", "[core][reduce]") {
  const tensor x = x23();
  REQUIRE_THROWS_WITH(sum(x, {2}),
                      Contains("sum(): dim 2 is out of range for a tensor with 2 dims"));
  REQUIRE_THROWS_WITH(x.mean({-3}), Contains("mean(): dim -3 is out of range"));
  REQUIRE_THROWS_WITH(max(x, 5), Contains("max(): dim 5 is out of range"));
  REQUIRE_THROWS_WITH(sum(x, {1, -1}),
                      Contains("sum(): dim 1 appears multiple times in the list of dims [1, -1]"));
  REQUIRE_THROWS_WITH(var(x, {0, 0}), Contains("var(): dim 0 appears multiple times"));

  REQUIRE_THROWS_WITH(
      mean(tensor_of({1, 2})),
      Contains(
          "mean(): could not infer output dtype. Input dtype must be floating point, got int64"));
  REQUIRE_THROWS_WITH(var(tensor_of({1, 2}, {.dtype = dtype::int32})),
                      Contains("var(): could not infer output dtype. Input dtype must be "
                               "floating point, got int32"));
  REQUIRE_THROWS_WITH(actorch::std(tensor_of({true, false})),
                      Contains("std(): could not infer output "
                               "dtype. Input dtype must be "
                               "floating point, got bool"));

  const tensor e = zeros({2, 0});
  REQUIRE_THROWS_WITH(max(e), Contains("max(): expected a non-empty tensor when reducing over "
                                       "all elements (input shape [2, 0])"));
  REQUIRE_THROWS_WITH(e.min(), Contains("min(): expected a non-empty tensor"));
  REQUIRE_THROWS_WITH(argmax(e), Contains("argmax(): expected a non-empty tensor"));
  REQUIRE_THROWS_WITH(e.max(1), Contains("max(): expected reduction dim 1 to have non-zero size "
                                         "(input shape [2, 0])"));
  REQUIRE_THROWS_WITH(argmin(e, -1), Contains("argmin(): expected reduction dim 1 to have "
                                              "non-zero size"));
  REQUIRE_THROWS_WITH(amax(e), Contains("amax(): expected reduction dim 1 to have non-zero size"));
  REQUIRE_THROWS_WITH(amin(e, {1}), Contains("amin(): expected reduction dim 1"));
  REQUIRE_THROWS_WITH(sum(tensor()), Contains("sum(): got an undefined tensor"));
}
