// index_select, gather and scatter_add against hand-computed values and independent loops:
// every dim, strided inputs and indices, several dtypes, 0-dim and empty cases, and the
// bounds errors (never an out-of-bounds read).
#include <catch2/catch.hpp>

#include "core/ops/factory.hpp"
#include "core/ops/index.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {

// [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
tensor grid() {
  return arange(1, 13).view({3, 4});
}

} // namespace

TEST_CASE("index_select picks slices along a dim", "[core][index]") {
  const tensor t = grid();
  const tensor rows = index_select(t, 0, tensor_of({2, 0, 2}));
  CHECK(rows.sizes() == shape_t{3, 4});
  CHECK(rows.dtype() == dtype::int64);
  CHECK(values_of(rows) == std::vector<double>{9, 10, 11, 12, 1, 2, 3, 4, 9, 10, 11, 12});
  const tensor cols = t.index_select(1, tensor_of({3, 1}));
  CHECK(cols.sizes() == shape_t{3, 2});
  CHECK(values_of(cols) == std::vector<double>{4, 2, 8, 6, 12, 10});
  CHECK(values_of(index_select(t, -1, tensor_of({3, 1}))) == values_of(cols));
  // An int32 index, and a 0-dim index (one slice, the dim kept).
  CHECK(values_of(index_select(t, 1, tensor_of({0, 0}, {.dtype = dtype::int32}))) ==
        std::vector<double>{1, 1, 5, 5, 9, 9});
  const tensor one = index_select(t, 0, scalar_tensor(int64_t(1)));
  CHECK(one.sizes() == shape_t{1, 4});
  CHECK(values_of(one) == std::vector<double>{5, 6, 7, 8});
  // An empty index gives an empty dim.
  CHECK(index_select(t, 0, empty({0}, {.dtype = dtype::int64})).sizes() == shape_t{0, 4});
}

TEST_CASE("index_select reads strided inputs and keeps every dtype", "[core][index]") {
  // The transpose's rows are the columns of the grid.
  const tensor tt = grid().t();
  CHECK(values_of(index_select(tt, 0, tensor_of({1, 3}))) ==
        std::vector<double>{2, 6, 10, 4, 8, 12});
  const tensor stepped = grid().slice(1, 0, 4, 2); // [[1, 3], [5, 7], [9, 11]]
  CHECK(values_of(index_select(stepped, 0, tensor_of({2, 1}))) == std::vector<double>{9, 11, 5, 7});
  // A 3-D tensor along its middle dim, against a loop: x[a][b][c] = 12a + 4b + c.
  const tensor x = arange(24).view({2, 3, 4});
  const std::vector<int64_t> idx{2, 0, 1, 2};
  std::vector<double> expected;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t j : idx)
      for (int64_t c = 0; c < 4; ++c)
        expected.push_back(double(12 * a + 4 * j + c));
  const tensor got = index_select(x, 1, as_tensor(idx));
  CHECK(got.sizes() == shape_t{2, 4, 4});
  CHECK(values_of(got) == expected);
  for (dtype t : {dtype::float64, dtype::float16, dtype::bfloat16, dtype::int8, dtype::bool_}) {
    INFO("dtype " << dtype_name(t));
    const tensor r = index_select(grid().to(t), 1, tensor_of({2}));
    CHECK(r.dtype() == t);
    CHECK(values_of(r) == values_of(grid().to(t).narrow(1, 2, 1)));
  }
  // A 0-dim input takes the one index 0.
  const tensor s = index_select(scalar_tensor(5.0), 0, tensor_of({0}));
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 5.0);
}

TEST_CASE("index_select rejects bad indices with the value and the valid range", "[core][index]") {
  const tensor t = grid();
  REQUIRE_THROWS_WITH(index_select(t, 0, tensor_of({0, 3})),
                      Contains("index_select: index 3 is out of bounds for dim 0 with size 3 "
                               "(expected an index in [0, 2])"));
  REQUIRE_THROWS_WITH(index_select(t, 0, tensor_of({-1})),
                      Contains("index_select: index -1 is out of bounds for dim 0 with size 3"));
  REQUIRE_THROWS_WITH(index_select(t, 1, tensor_of({4}, {.dtype = dtype::int32})),
                      Contains("index_select: index 4 is out of bounds for dim 1 with size 4"));
  REQUIRE_THROWS_WITH(index_select(zeros({0, 3}), 0, tensor_of({0})),
                      Contains("index 0 is out of bounds for dim 0 with size 0 (the dim is empty"));
  REQUIRE_THROWS_WITH(index_select(t, 0, tensor_of({0.0})),
                      Contains("index_select: expected an int64 or int32 index but got float32"));
  REQUIRE_THROWS_WITH(index_select(t, 0, tensor_of({{0, 1}})),
                      Contains("index_select: index must be 0-D or 1-D but got shape [1, 2]"));
  REQUIRE_THROWS_WITH(index_select(t, 2, tensor_of({0})),
                      Contains("index_select: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(index_select(scalar_tensor(1.0), 0, tensor_of({0, 0})),
                      Contains("index_select: a 0-dim tensor takes exactly one index but got 2"));
}

TEST_CASE("gather follows PyTorch's documented example", "[core][index]") {
  const tensor t = tensor_of({{1, 2}, {3, 4}});
  // out[i][j] = t[i][index[i][j]]
  CHECK(values_of(gather(t, 1, tensor_of({{0, 0}, {1, 0}}))) == std::vector<double>{1, 1, 4, 3});
  // out[i][j] = t[index[i][j]][j]
  CHECK(values_of(t.gather(0, tensor_of({{0, 1}, {1, 0}}))) == std::vector<double>{1, 4, 3, 2});
  CHECK(values_of(gather(t, -1, tensor_of({{1}, {0}}))) == std::vector<double>{2, 3});
  // index may be longer than the input along dim itself.
  const tensor long_idx = gather(t, 1, tensor_of({{1, 1, 0, 1, 0}, {0, 0, 0, 1, 1}}));
  CHECK(long_idx.sizes() == shape_t{2, 5});
  CHECK(values_of(long_idx) == std::vector<double>{2, 2, 1, 2, 1, 3, 3, 3, 4, 4});
}

TEST_CASE("gather with an index smaller than the input", "[core][index]") {
  const tensor t = grid();
  // out[0][j] = t[index[0][j]][j]: t[2][0], t[1][1], t[0][2]
  const tensor a = gather(t, 0, tensor_of({{2, 1, 0}}));
  CHECK(a.sizes() == shape_t{1, 3});
  CHECK(values_of(a) == std::vector<double>{9, 6, 3});
  // out[i][0] = t[i][index[i][0]]: t[0][3], t[1][0], t[2][2]
  CHECK(values_of(gather(t, 1, tensor_of({{3}, {0}, {2}}))) == std::vector<double>{4, 5, 11});
  CHECK(gather(t, 1, empty({0, 2}, {.dtype = dtype::int64})).sizes() == shape_t{0, 2});
}

TEST_CASE("gather matches a loop for 3-D, strided and transposed operands", "[core][index]") {
  const tensor x = arange(24).view({2, 3, 4}); // x[a][b][c] = 12a + 4b + c
  const tensor idx = tensor_of({2, 0, 1, 1, 2, 0, 0, 0, 2, 1, 1, 2}).view({2, 2, 3});
  const std::vector<double> iv = values_of(idx);
  std::vector<double> expected;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        expected.push_back(12.0 * double(a) + 4.0 * iv[size_t(a * 6 + b * 3 + c)] + double(c));
  CHECK(values_of(gather(x, 1, idx)) == expected);

  // A transposed input: xt[c][b][a] = x[a][b][c]; gather along dim 0 (xt's c).
  const tensor xt = x.permute({2, 1, 0}); // (4,3,2)
  const tensor idx0 = tensor_of({3, 0, 1, 2, 2, 3}).view({1, 3, 2});
  const std::vector<double> i0 = values_of(idx0);
  std::vector<double> expected0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t a = 0; a < 2; ++a)
      expected0.push_back(12.0 * double(a) + 4.0 * double(b) + i0[size_t(b * 2 + a)]);
  CHECK(values_of(gather(xt, 0, idx0)) == expected0);

  // A transposed index: gather(t, 1, idx.t()) equals gather with the contiguous copy.
  const tensor t = grid().to(dtype::float64);
  const tensor it = tensor_of({{0, 1, 2}, {3, 3, 0}}).t(); // (3,2), strides (1,3)
  CHECK(values_of(gather(t, 1, it)) == std::vector<double>{1, 4, 6, 8, 11, 9});
  CHECK(values_of(gather(t, 1, it)) == values_of(gather(t, 1, it.contiguous())));

  for (dtype d : {dtype::float16, dtype::bool_, dtype::uint8, dtype::float32}) {
    INFO("dtype " << dtype_name(d));
    const tensor r = gather(grid().to(d), 1, tensor_of({{3}, {0}, {2}}));
    CHECK(r.dtype() == d);
    CHECK(values_of(r) == values_of(tensor_of({4, 5, 11}).view({3, 1}).to(d)));
  }
  const tensor s = gather(scalar_tensor(7.0), 0, scalar_tensor(int64_t(0)));
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 7.0);
}

TEST_CASE("gather rejects bad indices and shapes", "[core][index]") {
  const tensor t = tensor_of({{1, 2}, {3, 4}});
  REQUIRE_THROWS_WITH(gather(t, 1, tensor_of({{0, 2}, {1, 0}})),
                      Contains("gather: index 2 is out of bounds for dim 1 with size 2 "
                               "(expected an index in [0, 1])"));
  REQUIRE_THROWS_WITH(gather(t, 0, tensor_of({{0, -2}})),
                      Contains("gather: index -2 is out of bounds for dim 0 with size 2"));
  REQUIRE_THROWS_WITH(gather(t, 1, tensor_of({{0}}, {.dtype = dtype::int32})),
                      Contains("gather: expected an int64 index but got int32"));
  REQUIRE_THROWS_WITH(gather(t, 1, tensor_of({0, 1})),
                      Contains("gather: index must have as many dims as the input (2) but has 1"));
  REQUIRE_THROWS_WITH(gather(t, 1, tensor_of({{0}, {0}, {0}})),
                      Contains("gather: index shape [3, 1] exceeds input shape [2, 2] at dim 0 "
                               "(3 > 2)"));
  REQUIRE_THROWS_WITH(gather(t, 2, tensor_of({{0}})), Contains("gather: dim 2 is out of range"));
}

TEST_CASE("scatter_add adds src at the indexed positions", "[core][index]") {
  const tensor index = tensor_of({{0, 1, 2, 0, 0}, {2, 0, 0, 1, 2}});
  const tensor src = tensor_of({{1.0, 2.0, 3.0, 4.0, 5.0}, {6.0, 7.0, 8.0, 9.0, 10.0}});
  // out[index[i][j]][j] += src[i][j], worked out column by column.
  const tensor z = zeros({3, 5});
  const tensor out = scatter_add(z, 0, index, src);
  CHECK(out.sizes() == shape_t{3, 5});
  CHECK(values_of(out) == std::vector<double>{1, 7, 8, 4, 5, 0, 2, 0, 9, 0, 6, 0, 3, 0, 10});
  CHECK(values_of(z) == std::vector<double>(15, 0.0)); // the input is not modified
  CHECK(values_of(scatter_add(ones({3, 5}), 0, index, src)) ==
        std::vector<double>{2, 8, 9, 5, 6, 1, 3, 1, 10, 1, 7, 1, 4, 1, 11});

  // Along dim 1 with repeated indices: out[i][index[i][j]] += src[i][j].
  const tensor dup =
      scatter_add(zeros({2, 3}, {.dtype = dtype::int64}), 1, tensor_of({{0, 0, 2}, {1, 1, 1}}),
                  tensor_of({{1, 2, 3}, {4, 5, 6}}));
  CHECK(dup.dtype() == dtype::int64);
  CHECK(values_of(dup) == std::vector<double>{3, 0, 3, 0, 15, 0});

  // src larger than index (only its leading part is read), and a transposed src.
  const tensor big_src = arange(1.0, 19.0).view({3, 6}); // rows 1..6, 7..12, 13..18
  CHECK(values_of(scatter_add(zeros({2, 3}), 1, tensor_of({{2}, {0}}), big_src)) ==
        std::vector<double>{0, 0, 1, 7, 0, 0});
  const tensor src_t = tensor_of({{1.0, 6.0}, {2.0, 7.0}, {3.0, 8.0}, {4.0, 9.0}, {5.0, 10.0}}).t();
  CHECK(values_of(scatter_add(zeros({3, 5}), 0, index, src_t)) == values_of(out));
}

TEST_CASE("scatter_add of ones undoes gather's fan-out, as gather's backward needs",
          "[core][index]") {
  const tensor x = arange(12.0).view({3, 4});
  const tensor idx = tensor_of({{0, 0, 3}, {1, 2, 1}, {3, 3, 3}});
  const tensor g = gather(x, 1, idx);
  // d(sum(gather(x)))/dx[i][k] counts how often k appears in idx's row i.
  const tensor grad = scatter_add(zeros_like(x), 1, idx, ones_like(g));
  CHECK(values_of(grad) == std::vector<double>{2, 0, 0, 1, 0, 2, 1, 0, 0, 0, 0, 3});
}

TEST_CASE("scatter_add rejects bad indices, shapes and dtypes", "[core][index]") {
  const tensor z = zeros({3, 5});
  const tensor src = ones({2, 5});
  REQUIRE_THROWS_WITH(scatter_add(z, 0, tensor_of({{0, 1, 3, 0, 0}}), src),
                      Contains("scatter_add: index 3 is out of bounds for dim 0 with size 3 "
                               "(expected an index in [0, 2])"));
  REQUIRE_THROWS_WITH(scatter_add(z, 0, tensor_of({{0, -1}}), src),
                      Contains("scatter_add: index -1 is out of bounds for dim 0 with size 3"));
  REQUIRE_THROWS_WITH(
      scatter_add(z, 0, tensor_of({{0, 1}}), ones({2, 5}, {.dtype = dtype::float64})),
      Contains("scatter_add: expected src to have the input's dtype float32 but "
               "got float64"));
  REQUIRE_THROWS_WITH(scatter_add(z, 0, tensor_of({{0, 1, 2, 0, 0}}), ones({2, 4})),
                      Contains("scatter_add: index shape [1, 5] exceeds src shape [2, 4] at dim 1 "
                               "(5 > 4)"));
  REQUIRE_THROWS_WITH(scatter_add(z, 0, zeros({1, 6}, {.dtype = dtype::int64}), ones({2, 6})),
                      Contains("scatter_add: index shape [1, 6] exceeds input shape [3, 5] at dim "
                               "1 (6 > 5)"));
  REQUIRE_THROWS_WITH(scatter_add(z, 0, tensor_of({0, 1}), src),
                      Contains("scatter_add: input, index and src must have the same number of "
                               "dims"));
  REQUIRE_THROWS_WITH(scatter_add(z, 0, tensor_of({{0.0}}), src),
                      Contains("scatter_add: expected an int64 index but got float32"));
}
