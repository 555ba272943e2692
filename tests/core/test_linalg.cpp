// mm, addmm, bmm and matmul against hand-computed products and an independent naive triple
// loop: every matmul rank combination, batch broadcasting, transposed / sliced / expanded
// operands, zero-size dims, the non-BLAS dtypes, and the errors with their messages.
#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "core/ops/factory.hpp"
#include "core/ops/linalg.hpp"
#include "kernels/cpu/gemm.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {

// Naive matmul of row-major (batch..., m, k) and (batch..., k, n) value arrays, broadcasting the
// batch dims numpy-style; written without the library so it checks it independently.
std::vector<double> naive_matmul(const std::vector<double>& a, shape_t sa,
                                 const std::vector<double>& b, shape_t sb) {
  const size_t nd = std::max(sa.size(), sb.size());
  sa.insert(sa.begin(), nd - sa.size(), 1);
  sb.insert(sb.begin(), nd - sb.size(), 1);
  const int64_t m = sa[nd - 2], k = sa[nd - 1], n = sb[nd - 1];
  REQUIRE(sb[nd - 2] == k);
  shape_t batch(nd - 2);
  int64_t batches = 1;
  for (size_t d = 0; d + 2 < nd; ++d) {
    batch[d] = std::max(sa[d], sb[d]);
    batches *= batch[d];
  }
  std::vector<double> out(size_t(batches * m * n), 0.0);
  for (int64_t flat = 0; flat < batches; ++flat) {
    // Decompose the batch index and find each operand's matrix (index 0 on size-1 dims).
    int64_t rest = flat, off_a = 0, off_b = 0, mul_a = 1, mul_b = 1;
    for (size_t d = nd - 2; d-- > 0;) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      off_a += (sa[d] == 1 ? 0 : i) * mul_a;
      off_b += (sb[d] == 1 ? 0 : i) * mul_b;
      mul_a *= sa[d];
      mul_b *= sb[d];
    }
    const double* pa = a.data() + off_a * m * k;
    const double* pb = b.data() + off_b * k * n;
    double* pc = out.data() + flat * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          pc[i * n + j] += pa[i * k + p] * pb[p * n + j];
  }
  return out;
}

std::vector<double> naive_matmul(const tensor& a, const tensor& b) {
  return naive_matmul(values_of(a), a.sizes(), values_of(b), b.sizes());
}

// Small integers (exact in every dtype's products) in a fixed pseudo-random pattern.
tensor pattern(const shape_t& shape, dtype t, int64_t seed = 1) {
  const int64_t n = checked_numel(shape, "pattern");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = double((i * 7 + seed * 3) % 9) - 4.0;
  return as_tensor(v, shape).to(t);
}

} // namespace

TEST_CASE("mm multiplies small matrices as computed by hand", "[core][linalg]") {
  const tensor a = tensor_of({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  const tensor b = tensor_of({{7.0, 8.0}, {9.0, 10.0}, {11.0, 12.0}});
  // [1*7+2*9+3*11, 1*8+2*10+3*12; 4*7+5*9+6*11, 4*8+5*10+6*12]
  const tensor c = mm(a, b);
  CHECK(c.sizes() == shape_t{2, 2});
  CHECK(c.dtype() == dtype::float32);
  CHECK(values_of(c) == std::vector<double>{58, 64, 139, 154});
  CHECK(values_of(a.mm(b)) == std::vector<double>{58, 64, 139, 154});
  // b^T a^T = (ab)^T, through transposed views of both.
  CHECK(values_of(mm(b.t(), a.t())) == std::vector<double>{58, 139, 64, 154});
}

TEST_CASE("mm_out writes the product into out, whatever out held, and refuses an out it cannot "
          "write",
          "[core][linalg]") {
  const tensor a = tensor_of({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  const tensor b = tensor_of({{7.0, 8.0}, {9.0, 10.0}, {11.0, 12.0}});
  const tensor out = full({2, 2}, std::numeric_limits<double>::quiet_NaN());
  const uint64_t version = out.storage()->version();
  const tensor r = mm_out(out, a, b);
  CHECK(r.data_ptr() == out.data_ptr());
  CHECK(values_of(out) == std::vector<double>{58, 64, 139, 154}); // the NaNs were not read
  CHECK(out.storage()->version() > version);
  CHECK(values_of(mm_out(out, b.t(), a.t())) == std::vector<double>{58, 139, 64, 154});
  CHECK_THROWS_WITH(mm_out(zeros({2, 3}), a, b),
                    Contains("mm_out: out ([2, 3], float32, cpu) must be [2, 2], float32, cpu"));
  CHECK_THROWS_WITH(mm_out(zeros({2, 2}, {.dtype = dtype::float64}), a, b),
                    Contains("must be [2, 2], float32, cpu"));
  CHECK_THROWS_WITH(mm_out(zeros({2, 2}).t(), a, b), Contains("must be contiguous"));
  const tensor square = tensor_of({{1.0, 2.0}, {3.0, 4.0}});
  CHECK_THROWS_WITH(mm_out(square, square, square), Contains("shares memory with an operand"));
}

TEST_CASE("mm gives the same values in every dtype it supports", "[core][linalg]") {
  const std::vector<double> expected{58, 64, 139, 154};
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int8,
                  dtype::uint8, dtype::int32, dtype::int64}) {
    INFO("dtype " << dtype_name(t));
    const tensor a = tensor_of({{1, 2, 3}, {4, 5, 6}}).to(t);
    const tensor b = tensor_of({{7, 8}, {9, 10}, {11, 12}}).to(t);
    const tensor c = mm(a, b);
    CHECK(c.dtype() == t);
    if (t == dtype::int8) // 139 and 154 wrap around modulo 256, as in PyTorch
      CHECK(values_of(c) == std::vector<double>{58, 64, 139 - 256, 154 - 256});
    else
      CHECK(values_of(c) == expected);
  }
}

TEST_CASE("mm accepts transposed, sliced and expanded operands", "[core][linalg]") {
  for (dtype t : {dtype::float32, dtype::float64, dtype::int64, dtype::float16}) {
    INFO("dtype " << dtype_name(t));
    const tensor base = pattern({6, 8}, t);
    const tensor other = pattern({8, 6}, t, 2);
    // Transposed (column-contiguous) operands pass to BLAS with the transpose flag.
    const tensor at = base.t();  // (8,6), stride (1, 8)
    const tensor bt = other.t(); // (6,8)
    CHECK(values_of(mm(at, bt)) == naive_matmul(at, bt));
    // Rows sliced with a step keep a leading dim of 16.
    const tensor rows = base.slice(0, 0, 6, 2); // (3,8), stride (16,1)
    CHECK(values_of(mm(rows, other)) == naive_matmul(rows, other));
    // Columns sliced with a step need a copy.
    const tensor cols = base.slice(1, 1, 8, 2);       // (6,4), stride (8,2)
    const tensor half_rows = other.slice(0, 0, 8, 2); // (4,6)
    CHECK(values_of(mm(cols, half_rows)) == naive_matmul(cols, half_rows));
    CHECK(values_of(mm(half_rows.t(), cols.t())) == naive_matmul(half_rows.t(), cols.t()));
    // Expanded operands (stride 0) are made contiguous.
    const tensor row = pattern({8}, t).unsqueeze(0).expand({5, 8});
    const tensor col = pattern({8}, t, 3).unsqueeze(1).expand({8, 4});
    CHECK(values_of(mm(row, col)) == naive_matmul(row, col));
    // A window inside a larger matrix: leading dim 8 and a storage offset.
    const tensor wa = base.narrow(0, 1, 4).narrow(1, 2, 5);  // (4,5)
    const tensor wb = other.narrow(0, 3, 5).narrow(1, 1, 3); // (5,3)
    CHECK(values_of(mm(wa, wb)) == naive_matmul(wa, wb));
    // Vectors viewed as (n,1) and (1,n) matrices with strides that BLAS never reads.
    const tensor strided_col = pattern({16}, t).slice(0, 0, 16, 2).unsqueeze(1); // (8,1)
    CHECK(values_of(mm(base, strided_col)) == naive_matmul(base, strided_col));
  }
}

TEST_CASE("mm of larger matrices matches the naive loop across block boundaries",
          "[core][linalg]") {
  // 70 columns crosses the fallback loop's 64-column panels; float32 goes through OpenBLAS.
  for (dtype t : {dtype::float32, dtype::int32, dtype::float16}) {
    INFO("dtype " << dtype_name(t));
    const tensor a = pattern({33, 20}, t);
    const tensor b = pattern({20, 70}, t, 5);
    CHECK(values_of(mm(a, b)) == naive_matmul(a, b));
    CHECK(values_of(mm(b.t(), a.t())) == naive_matmul(b.t(), a.t()));
  }
  const tensor x = rand({40, 50}, {.dtype = dtype::float64});
  const tensor y = rand({50, 30}, {.dtype = dtype::float64});
  const std::vector<double> got = values_of(mm(x, y));
  const std::vector<double> want = naive_matmul(x, y);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("mm handles zero-size dims", "[core][linalg]") {
  for (dtype t : {dtype::float32, dtype::int64}) {
    INFO("dtype " << dtype_name(t));
    const tensor e = mm(zeros({0, 3}, {.dtype = t}), ones({3, 4}, {.dtype = t}));
    CHECK(e.sizes() == shape_t{0, 4});
    // An empty inner dim gives a sum over nothing: zeros, not uninitialised memory.
    const tensor z = mm(ones({2, 0}, {.dtype = t}), ones({0, 3}, {.dtype = t}));
    CHECK(z.sizes() == shape_t{2, 3});
    CHECK(values_of(z) == std::vector<double>(6, 0.0));
    CHECK(mm(ones({2, 3}, {.dtype = t}), ones({3, 0}, {.dtype = t})).sizes() == shape_t{2, 0});
  }
}

TEST_CASE("addmm scales and adds a broadcast input", "[core][linalg]") {
  const tensor a = tensor_of({{1.0, 2.0}, {3.0, 4.0}}, {.dtype = dtype::float64});
  const tensor b = tensor_of({{5.0, 6.0}, {7.0, 8.0}}, {.dtype = dtype::float64});
  // a @ b = [[19, 22], [43, 50]]
  const tensor bias = tensor_of({1.0, -1.0}, {.dtype = dtype::float64});
  CHECK(values_of(addmm(bias, a, b)) == std::vector<double>{20, 21, 44, 49});
  // 0.5 * bias + 2 * (a @ b)
  CHECK(values_of(addmm(bias, a, b, 0.5, 2)) == std::vector<double>{38.5, 43.5, 86.5, 99.5});
  // A full (2,2) input and a column (2,1) input.
  const tensor full_in = tensor_of({{1.0, 2.0}, {3.0, 4.0}}, {.dtype = dtype::float64});
  CHECK(values_of(addmm(full_in, a, b, -1)) == std::vector<double>{18, 20, 40, 46});
  const tensor col = tensor_of({{10.0}, {100.0}}, {.dtype = dtype::float64});
  CHECK(values_of(addmm(col, a, b)) == std::vector<double>{29, 32, 143, 150});
  // A 0-dim input.
  CHECK(values_of(addmm(scalar_tensor(1.0, {.dtype = dtype::float64}), a, b)) ==
        std::vector<double>{20, 23, 44, 51});
  // Integers: 3 * input + 2 * (a @ b).
  const tensor ai = tensor_of({{1, 2}, {3, 4}});
  const tensor bi = tensor_of({{5, 6}, {7, 8}});
  CHECK(values_of(addmm(tensor_of({1, 2}), ai, bi, 3, 2)) == std::vector<double>{41, 50, 89, 106});
}

TEST_CASE("addmm with beta 0 ignores NaNs in the input", "[core][linalg]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const tensor in = full({2, 2}, nan);
  const tensor a = tensor_of({{1.0, 2.0}, {3.0, 4.0}});
  const tensor b = tensor_of({{5.0, 6.0}, {7.0, 8.0}});
  CHECK(values_of(addmm(in, a, b, 0)) == std::vector<double>{19, 22, 43, 50});
  // With beta != 0 the NaN propagates.
  for (double v : values_of(addmm(in, a, b, 1)))
    CHECK(std::isnan(v));
}

TEST_CASE("gemm with beta 0 never reads C", "[core][linalg]") {
  // C is filled with NaN; BLAS's contract (and the fallback loop's) is to overwrite it.
  const float a[4] = {1, 2, 3, 4}; // (2,2)
  const float b[4] = {5, 6, 7, 8};
  float c[4];
  std::fill(c, c + 4, std::numeric_limits<float>::quiet_NaN());
  kernels::cpu::gemm(dtype::float32, 2, 2, 2, 1, {a, 2, false}, {b, 2, false}, 0, c, 2);
  CHECK(std::vector<float>(c, c + 4) == std::vector<float>{19, 22, 43, 50});
  // The fallback loop (float16), with A transposed: A^T = [[1, 3], [2, 4]].
  const half ha[4] = {1.f, 2.f, 3.f, 4.f};
  const half hb[4] = {5.f, 6.f, 7.f, 8.f};
  half hc[4];
  std::fill(hc, hc + 4, half(std::numeric_limits<float>::quiet_NaN()));
  kernels::cpu::gemm(dtype::float16, 2, 2, 2, 1, {ha, 2, true}, {hb, 2, false}, 0, hc, 2);
  CHECK(std::vector<float>(hc, hc + 4) == std::vector<float>{26, 30, 38, 44});
  // k == 0 with beta 0: zeros.
  std::fill(c, c + 4, std::numeric_limits<float>::quiet_NaN());
  kernels::cpu::gemm(dtype::float32, 2, 2, 0, 1, {a, 1, false}, {b, 2, false}, 0, c, 2);
  CHECK(std::vector<float>(c, c + 4) == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("bmm multiplies each batch entry", "[core][linalg]") {
  const tensor a = tensor_of({1.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 2.0}).view({2, 2, 2});
  const tensor b = tensor_of({5.0, 6.0, 7.0, 8.0, 1.0, 1.0, 1.0, 1.0}).view({2, 2, 2});
  // [[19,22],[43,50]] and [[1,1],[2,2]]
  const tensor c = bmm(a, b);
  CHECK(c.sizes() == shape_t{2, 2, 2});
  CHECK(values_of(c) == std::vector<double>{19, 22, 43, 50, 1, 1, 2, 2});
  CHECK(values_of(a.bmm(b)) == values_of(c));

  for (dtype t : {dtype::float32, dtype::float64, dtype::int32}) {
    INFO("dtype " << dtype_name(t));
    const tensor x = pattern({3, 4, 5}, t);
    const tensor y = pattern({3, 5, 2}, t, 4);
    CHECK(values_of(bmm(x, y)) == naive_matmul(x, y));
    // Transposed matrices, a step-sliced batch and an expanded (stride-0) batch.
    const tensor xt = pattern({3, 5, 4}, t).transpose(1, 2);
    CHECK(values_of(bmm(xt, y)) == naive_matmul(xt, y));
    const tensor xs = pattern({6, 4, 5}, t).slice(0, 0, 6, 2);
    CHECK(values_of(bmm(xs, y)) == naive_matmul(xs, y));
    const tensor ye = pattern({1, 5, 2}, t).expand({3, 5, 2});
    CHECK(values_of(bmm(x, ye)) == naive_matmul(x, ye));
  }
  CHECK(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes() == shape_t{0, 2, 4});
  CHECK(values_of(bmm(ones({2, 2, 0}), ones({2, 0, 3}))) == std::vector<double>(12, 0.0));
}

TEST_CASE("matmul follows PyTorch's rules for every rank combination", "[core][linalg]") {
  const tensor v3 = tensor_of({1.0, 2.0, 3.0});
  const tensor w3 = tensor_of({4.0, 5.0, 6.0});
  const tensor m23 = tensor_of({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});

  SECTION("1-D . 1-D is a 0-dim dot product") {
    const tensor d = matmul(v3, w3);
    CHECK(d.dim() == 0);
    CHECK(d.item<double>() == 32.0); // 4 + 10 + 18
    CHECK(v3.matmul(w3).item<double>() == 32.0);
  }
  SECTION("2-D . 1-D is a matrix-vector product") {
    const tensor r = matmul(m23, v3);
    CHECK(r.sizes() == shape_t{2});
    CHECK(values_of(r) == std::vector<double>{14, 32});
  }
  SECTION("1-D . 2-D is a vector-matrix product") {
    const tensor r = matmul(tensor_of({1.0, -1.0}), m23);
    CHECK(r.sizes() == shape_t{3});
    CHECK(values_of(r) == std::vector<double>{-3, -3, -3});
  }
  SECTION("2-D . 2-D is mm") {
    const tensor r = matmul(m23, m23.t());
    CHECK(r.sizes() == shape_t{2, 2});
    CHECK(values_of(r) == std::vector<double>{14, 32, 32, 77});
  }
  SECTION("N-D . 1-D multiplies every matrix by the vector") {
    const tensor a = pattern({2, 3, 4, 3}, dtype::float32);
    const tensor r = matmul(a, v3);
    CHECK(r.sizes() == shape_t{2, 3, 4});
    CHECK(values_of(r) == naive_matmul(values_of(a), a.sizes(), values_of(v3), {3, 1}));
  }
  SECTION("1-D . N-D multiplies the vector by every matrix") {
    const tensor b = pattern({2, 3, 2}, dtype::float32);
    const tensor r = matmul(v3, b);
    CHECK(r.sizes() == shape_t{2, 2});
    CHECK(values_of(r) == naive_matmul(values_of(v3), {1, 3}, values_of(b), b.sizes()));
  }
  SECTION("N-D . 2-D shares the matrix across the batch") {
    const tensor a = pattern({2, 4, 2, 3}, dtype::float64);
    const tensor r = matmul(a, m23.t().to(dtype::float64));
    CHECK(r.sizes() == shape_t{2, 4, 2, 2});
    CHECK(values_of(r) == naive_matmul(a, m23.t()));
  }
  SECTION("2-D . N-D shares the matrix across the batch") {
    const tensor b = pattern({4, 3, 5}, dtype::float32);
    const tensor r = matmul(m23, b);
    CHECK(r.sizes() == shape_t{4, 2, 5});
    CHECK(values_of(r) == naive_matmul(m23, b));
  }
  SECTION("N-D . N-D broadcasts the batch dims") {
    const tensor a = pattern({2, 1, 4, 3}, dtype::float32);
    const tensor b = pattern({3, 3, 2}, dtype::float32, 7);
    const tensor r = matmul(a, b);
    CHECK(r.sizes() == shape_t{2, 3, 4, 2});
    CHECK(values_of(r) == naive_matmul(a, b));
    // Broadcasting in both directions, and the result's shape from both.
    const tensor c = pattern({5, 1, 2, 3}, dtype::int64);
    const tensor d = pattern({1, 4, 3, 2}, dtype::int64, 2);
    const tensor cd = matmul(c, d);
    CHECK(cd.sizes() == shape_t{5, 4, 2, 2});
    CHECK(cd.dtype() == dtype::int64);
    CHECK(values_of(cd) == naive_matmul(c, d));
  }
  SECTION("N-D . N-D with transposed and sliced operands") {
    const tensor a = pattern({3, 2, 5, 4}, dtype::float32).transpose(-1, -2); // (3,2,4,5)
    const tensor b = pattern({3, 4, 5, 2}, dtype::float32).slice(1, 0, 4, 2); // (3,2,5,2)
    CHECK(values_of(matmul(a, b)) == naive_matmul(a, b));
    const tensor bt = pattern({2, 3, 5}, dtype::float32).transpose(0, 1); // (3,2,5), odd batch
    CHECK(values_of(matmul(bt, pattern({5, 2}, dtype::float32))) ==
          naive_matmul(bt, pattern({5, 2}, dtype::float32)));
    const tensor lhs = pattern({2, 5}, dtype::float32);
    CHECK(values_of(matmul(lhs, bt.transpose(1, 2))) == naive_matmul(lhs, bt.transpose(1, 2)));
  }
  SECTION("zero-size batch and matrix dims") {
    CHECK(matmul(zeros({0, 2, 3}), zeros({3, 4})).sizes() == shape_t{0, 2, 4});
    CHECK(matmul(zeros({2, 0, 3}), zeros({1, 3, 4})).sizes() == shape_t{2, 0, 4});
    CHECK(values_of(matmul(ones({2, 3, 0}), ones({0, 4}))) == std::vector<double>(24, 0.0));
    CHECK(matmul(zeros({0}), zeros({0})).item<double>() == 0.0);
  }
}

TEST_CASE("matrix products reject mismatched shapes, ranks and dtypes", "[core][linalg]") {
  const tensor a23 = ones({2, 3});
  const tensor a45 = ones({4, 5});
  REQUIRE_THROWS_WITH(mm(a23, a45),
                      Contains("mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  REQUIRE_THROWS_WITH(mm(a23, ones({3})),
                      Contains("mm: expected 2-D tensors but got shapes [2, 3] and [3]"));
  REQUIRE_THROWS_WITH(mm(a23, ones({3, 2}, {.dtype = dtype::float64})),
                      Contains("mm: expected mat1 and mat2 to have the same dtype, but got: "
                               "float32 != float64"));
  REQUIRE_THROWS_WITH(
      mm(ones({2, 2}, {.dtype = dtype::bool_}), ones({2, 2}, {.dtype = dtype::bool_})),
      Contains("mm: matrix products of bool tensors are not supported"));
  REQUIRE_THROWS_WITH(bmm(a23, ones({2, 3, 4})),
                      Contains("bmm: expected 3-D tensors but got shapes [2, 3] and [2, 3, 4]"));
  REQUIRE_THROWS_WITH(bmm(ones({2, 3, 4}), ones({3, 4, 5})),
                      Contains("bmm: batch sizes differ (2 and 3)"));
  REQUIRE_THROWS_WITH(bmm(ones({2, 3, 4}), ones({2, 5, 6})),
                      Contains("bmm: batch1 and batch2 shapes cannot be multiplied (2x3x4 and "
                               "2x5x6: 4 != 5)"));
  REQUIRE_THROWS_WITH(matmul(scalar_tensor(1.0), a23),
                      Contains("matmul: both arguments need to be at least 1-D, but got shapes "
                               "[] and [2, 3]"));
  REQUIRE_THROWS_WITH(matmul(ones({3}), ones({4})),
                      Contains("matmul: shapes [3] and [4] cannot be multiplied (3 != 4)"));
  REQUIRE_THROWS_WITH(matmul(a23, ones({4})),
                      Contains("matmul: shapes [2, 3] and [4] cannot be multiplied (3 != 4)"));
  REQUIRE_THROWS_WITH(matmul(ones({2, 2, 3}), ones({3, 3, 4})),
                      Contains("matmul: the batch dims of shapes [2, 2, 3] and [3, 3, 4] cannot "
                               "be broadcast together ([2] vs [3])"));
  REQUIRE_THROWS_WITH(matmul(ones({2, 3}, {.dtype = dtype::int64}), ones({3, 2})),
                      Contains("matmul: expected mat1 and mat2 to have the same dtype, but got: "
                               "int64 != float32"));
  REQUIRE_THROWS_WITH(addmm(ones({3}), a23, ones({3, 4})),
                      Contains("addmm: shapes [3] and [2, 4] cannot be broadcast together"));
  REQUIRE_THROWS_WITH(addmm(ones({2, 4, 1}), a23, ones({3, 4})),
                      Contains("addmm: input of shape [2, 4, 1] cannot be broadcast to the "
                               "result's shape [2, 4]"));
  REQUIRE_THROWS_WITH(addmm(ones({2, 4}, {.dtype = dtype::float64}), a23, ones({3, 4})),
                      Contains("addmm: expected input and mat1 to have the same dtype, but got: "
                               "float64 != float32"));
  REQUIRE_THROWS_WITH(addmm(ones({2, 2}, {.dtype = dtype::int64}),
                            ones({2, 2}, {.dtype = dtype::int64}),
                            ones({2, 2}, {.dtype = dtype::int64}), 0.5),
                      Contains("addmm: for integral input tensors, alpha and beta must not be "
                               "floating point numbers (got alpha 1, beta 0.5)"));
  REQUIRE_THROWS_WITH(mm(a23, tensor()), Contains("mm: got an undefined tensor"));
}
