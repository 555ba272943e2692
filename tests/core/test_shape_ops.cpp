// cat and stack against hand-written results: every dim, negative dims, type promotion,
// PyTorch's legacy skipping of shape-[0] tensors in cat, strided inputs, and the errors.
#include <catch2/catch.hpp>

#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("cat joins tensors along an existing dim", "[core][shape]") {
  const tensor a = tensor_of({{1, 2, 3}, {4, 5, 6}});
  const tensor b = tensor_of({{7, 8, 9}});
  const tensor rows = cat({a, b}, 0);
  CHECK(rows.sizes() == shape_t{3, 3});
  CHECK(rows.dtype() == dtype::int64);
  CHECK(values_of(rows) == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  const tensor c = tensor_of({{10}, {11}});
  const tensor cols = cat({a, c, a}, 1);
  CHECK(cols.sizes() == shape_t{2, 7});
  CHECK(values_of(cols) == std::vector<double>{1, 2, 3, 10, 1, 2, 3, 4, 5, 6, 11, 4, 5, 6});
  CHECK(values_of(cat({a, c}, -1)) == std::vector<double>{1, 2, 3, 10, 4, 5, 6, 11});
  // A single tensor is copied, not aliased.
  const tensor single = cat({a});
  CHECK(values_of(single) == values_of(a));
  CHECK(single.storage() != a.storage());
  // 3-D along the middle dim.
  const tensor x = arange(8).view({2, 2, 2});
  const tensor y = arange(100, 104).view({2, 1, 2});
  CHECK(values_of(cat({x, y}, 1)) ==
        std::vector<double>{0, 1, 2, 3, 100, 101, 4, 5, 6, 7, 102, 103});
}

TEST_CASE("cat reads strided inputs and zero-size parts", "[core][shape]") {
  const tensor a = tensor_of({{1.0, 2.0}, {3.0, 4.0}});
  // a.t() = [[1, 3], [2, 4]]; a column sliced with a step; an expanded row.
  const tensor stepped = arange(1.0, 7.0).view({2, 3}).slice(1, 0, 3, 2); // [[1, 3], [4, 6]]
  const tensor expanded = tensor_of({9.0, 8.0}).unsqueeze(0).expand({2, 2});
  CHECK(values_of(cat({a.t(), stepped, expanded}, 0)) ==
        std::vector<double>{1, 3, 2, 4, 1, 3, 4, 6, 9, 8, 9, 8});
  CHECK(values_of(cat({a.t(), stepped}, 1)) == std::vector<double>{1, 3, 1, 3, 2, 4, 4, 6});
  // Parts that are empty along dim contribute nothing; the others still must match.
  const tensor joined = cat({zeros({0, 2}), a, zeros({0, 2})}, 0);
  CHECK(joined.sizes() == shape_t{2, 2});
  CHECK(values_of(joined) == std::vector<double>{1, 2, 3, 4});
  CHECK(cat({zeros({2, 0}), zeros({2, 0})}, 1).sizes() == shape_t{2, 0});
}

TEST_CASE("cat promotes dtypes across its inputs", "[core][shape]") {
  const tensor i = tensor_of({1, 2});
  const tensor f = tensor_of({0.5});
  const tensor r = cat({i, f});
  CHECK(r.dtype() == dtype::float32);
  CHECK(values_of(r) == std::vector<double>{1, 2, 0.5});
  CHECK(cat({tensor_of({1}, {.dtype = dtype::int32}), tensor_of({2})}).dtype() == dtype::int64);
  CHECK(cat({tensor_of({true}), tensor_of({3}, {.dtype = dtype::uint8})}).dtype() == dtype::uint8);
  CHECK(cat({tensor_of({1.0}, {.dtype = dtype::float16}),
             tensor_of({2.0}, {.dtype = dtype::bfloat16})})
            .dtype() == dtype::float32);
  CHECK(cat({tensor_of({1.0}), tensor_of({2.0}, {.dtype = dtype::float64})}).dtype() ==
        dtype::float64);
}

TEST_CASE("cat skips 1-D empty tensors whatever the other shapes", "[core][shape]") {
  const tensor a = tensor_of({{1.0, 2.0}, {3.0, 4.0}});
  const tensor legacy = empty({0});
  const tensor r = cat({legacy, a, legacy, a}, 1);
  CHECK(r.sizes() == shape_t{2, 4});
  CHECK(values_of(r) == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});
  // The skipped tensor still takes part in type promotion.
  CHECK(cat({empty({0}, {.dtype = dtype::float64}), a}).dtype() == dtype::float64);
  // Only skipped tensors: an empty 1-D result.
  const tensor e = cat({legacy, empty({0}, {.dtype = dtype::int64})});
  CHECK(e.sizes() == shape_t{0});
  CHECK(e.dtype() == dtype::float32);
  // A 2-D empty tensor is not skipped and must match.
  REQUIRE_THROWS_WITH(cat({zeros({0, 3}), a}, 0),
                      Contains("cat: sizes of tensors must match except in dim 0: expected size 3 "
                               "but got size 2 in dim 1 for the tensor at position 1"));
}

TEST_CASE("cat rejects bad lists with the position and shapes", "[core][shape]") {
  const tensor a = zeros({2, 3});
  REQUIRE_THROWS_WITH(cat({}), Contains("cat: expected a non-empty list of tensors"));
  REQUIRE_THROWS_WITH(cat({a, scalar_tensor(1.0)}),
                      Contains("cat: the zero-dimensional tensor at position 1 cannot be "
                               "concatenated"));
  REQUIRE_THROWS_WITH(cat({a, zeros({1, 2, 3})}),
                      Contains("cat: tensors must have the same number of dims, but the tensor at "
                               "position 1 has shape [1, 2, 3] and the tensor at position 0 has "
                               "shape [2, 3]"));
  REQUIRE_THROWS_WITH(cat({a, a, zeros({2, 4})}, 0),
                      Contains("cat: sizes of tensors must match except in dim 0: expected size 3 "
                               "but got size 4 in dim 1 for the tensor at position 2 (shape "
                               "[2, 4]; the tensor at position 0 has shape [2, 3])"));
  REQUIRE_THROWS_WITH(cat({a, a}, 2), Contains("cat: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(cat({a, tensor()}), Contains("cat: the tensor at position 1 is undefined"));
}

TEST_CASE("stack joins equal shapes along a new dim", "[core][shape]") {
  const tensor a = tensor_of({1, 2, 3});
  const tensor b = tensor_of({4, 5, 6});
  const tensor s0 = stack({a, b});
  CHECK(s0.sizes() == shape_t{2, 3});
  CHECK(values_of(s0) == std::vector<double>{1, 2, 3, 4, 5, 6});
  const tensor s1 = stack({a, b}, 1);
  CHECK(s1.sizes() == shape_t{3, 2});
  CHECK(values_of(s1) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(values_of(stack({a, b}, -1)) == values_of(s1));
  CHECK(stack({a, b}, -2).sizes() == shape_t{2, 3});
  // 2-D inputs along the last new dim: out[i][j][k] = inputs[k][i][j].
  const tensor m = tensor_of({{1.0, 2.0}, {3.0, 4.0}});
  const tensor s2 = stack({m, m.t(), m * 10.0}, 2);
  CHECK(s2.sizes() == shape_t{2, 2, 3});
  CHECK(values_of(s2) == std::vector<double>{1, 1, 10, 2, 3, 20, 3, 2, 30, 4, 4, 40});
  // 0-dim inputs give a vector; dtypes promote; empty inputs stack.
  const tensor v = stack({scalar_tensor(1), scalar_tensor(2.5)});
  CHECK(v.sizes() == shape_t{2});
  CHECK(v.dtype() == dtype::float32);
  CHECK(values_of(v) == std::vector<double>{1, 2.5});
  CHECK(stack({empty({0}), empty({0})}).sizes() == shape_t{2, 0});
  CHECK(stack({zeros({0, 2}), zeros({0, 2})}, 1).sizes() == shape_t{0, 2, 2});
}

TEST_CASE("stack rejects bad lists with the position and shapes", "[core][shape]") {
  REQUIRE_THROWS_WITH(stack({}), Contains("stack: expected a non-empty list of tensors"));
  REQUIRE_THROWS_WITH(stack({zeros({2, 3}), zeros({2, 3}), zeros({3, 2})}),
                      Contains("stack: expects each tensor to be equal size, but got [2, 3] at "
                               "position 0 and [3, 2] at position 2"));
  REQUIRE_THROWS_WITH(stack({zeros({2}), zeros({2})}, 2), Contains("stack: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(stack({zeros({2}), tensor()}),
                      Contains("stack: the tensor at position 1 is undefined"));
}
