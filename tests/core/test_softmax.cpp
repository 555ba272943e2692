// softmax and log_softmax: hand-computed values along the last, first and middle dims,
// stability for large inputs, non-contiguous, empty, 0-dim and 16-bit inputs, the errors, and
// the backward functions against hand-computed values and float64 central differences.
#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/softmax.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax([1, 2, 3]) = e^i / (e + e^2 + e^3), and log_softmax = i - log(e + e^2 + e^3), to 17
// digits (log(e + e^2 + e^3) = 3.40760596444438...).
const std::vector<double> kSoftmax123 = {0.09003057317038046, 0.24472847105479767,
                                         0.6652409557748219};
const std::vector<double> kLogSoftmax123 = {-2.40760596444438, -1.4076059644443801,
                                            -0.40760596444438013};
// softmax([a, a + 1]) and softmax([a, a + 2]).
const double kSig1 = 0.2689414213699951, kSig2 = 0.11920292202211755;
} // namespace

TEST_CASE("softmax and log_softmax match hand-computed values", "[core][softmax]") {
  const tensor x = tensor_of({1.0, 2.0, 3.0}, {.dtype = dtype::float64});
  CHECK(softmax(x, 0).dtype() == dtype::float64);
  CHECK(close(values_of(softmax(x, 0)), kSoftmax123, 1e-15));
  CHECK(close(values_of(x.log_softmax(-1)), kLogSoftmax123, 1e-15));
  CHECK(close(values_of(x.softmax(-1)), kSoftmax123, 1e-15));

  SECTION("float32 too") {
    const tensor f = tensor_of({1.0, 2.0, 3.0});
    CHECK(softmax(f, 0).dtype() == dtype::float32);
    CHECK(close(values_of(softmax(f, 0)), kSoftmax123, 1e-6));
    CHECK(close(values_of(log_softmax(f, 0)), kLogSoftmax123, 1e-6));
  }
  SECTION("large inputs do not overflow: the max is subtracted first") {
    const tensor big = tensor_of({1000.0, 1001.0, 1002.0});
    CHECK(close(values_of(softmax(big, 0)), kSoftmax123, 1e-6));
    CHECK(close(values_of(log_softmax(big, 0)), kLogSoftmax123, 1e-6));
    const tensor tiny = tensor_of({-1000.0, -999.0, -998.0}, {.dtype = dtype::float64});
    CHECK(close(values_of(softmax(tiny, 0)), kSoftmax123, 1e-14));
  }
  SECTION("-inf gets probability 0, and NaN spreads to its whole slice") {
    const tensor t = tensor_of({-kInf, 0.0, 0.0}, {.dtype = dtype::float64});
    CHECK(values_of(softmax(t, 0)) == std::vector<double>{0, 0.5, 0.5});
    const std::vector<double> ls = values_of(log_softmax(t, 0));
    CHECK(ls[0] == -kInf);
    CHECK(close({ls[1], ls[2]}, {-std::log(2.0), -std::log(2.0)}, 1e-15));
    const tensor n = tensor_of({{1.0, kNaN}, {1.0, 2.0}});
    const std::vector<double> s = values_of(softmax(n, 1));
    CHECK(std::isnan(s[0]));
    CHECK(std::isnan(s[1]));
    CHECK(close({s[2], s[3]}, {kSig1, 1 - kSig1}));
  }
}

TEST_CASE("softmax works along any dim of a 2-d and 3-d tensor", "[core][softmax]") {
  const tensor m = tensor_of({{1.0, 1.0}, {2.0, 3.0}}, {.dtype = dtype::float64});
  SECTION("last dim: one row per softmax") {
    CHECK(close(values_of(softmax(m, 1)), {0.5, 0.5, kSig1, 1 - kSig1}, 1e-15));
    CHECK(close(values_of(log_softmax(m, -1)),
                {-std::log(2.0), -std::log(2.0), std::log(kSig1), std::log(1 - kSig1)}, 1e-14));
  }
  SECTION("first dim: columns") {
    // Column 0 is [1, 2], column 1 is [1, 3].
    CHECK(close(values_of(softmax(m, 0)), {kSig1, kSig2, 1 - kSig1, 1 - kSig2}, 1e-15));
    CHECK(close(values_of(log_softmax(m, -2)),
                {std::log(kSig1), std::log(kSig2), std::log(1 - kSig1), std::log(1 - kSig2)},
                1e-14));
  }
  SECTION("middle dim of a 3-d tensor") {
    // t[i][j][k] = 4i + 2j + k: along j every pair is [a, a + 2].
    const tensor t = arange(8, {.dtype = dtype::float64}).view({2, 2, 2});
    const tensor s = softmax(t, 1);
    CHECK(s.sizes() == shape_t{2, 2, 2});
    CHECK(close(values_of(s),
                {kSig2, kSig2, 1 - kSig2, 1 - kSig2, kSig2, kSig2, 1 - kSig2, 1 - kSig2}, 1e-15));
    // Along i every pair is [a, a + 4]: softmax is [1 / (1 + e^4), e^4 / (1 + e^4)].
    const double p = 1 / (1 + std::exp(4.0));
    CHECK(close(values_of(softmax(t, 0)), {p, p, p, p, 1 - p, 1 - p, 1 - p, 1 - p}, 1e-15));
  }
  SECTION("non-contiguous inputs give contiguous results in their logical order") {
    const tensor mt = m.t(); // [[1, 2], [1, 3]]
    const tensor s = softmax(mt, 1);
    CHECK(s.is_contiguous());
    CHECK(close(values_of(s), {kSig1, 1 - kSig1, kSig2, 1 - kSig2}, 1e-15));
    // Expanded: every row is [1, 2, 3].
    const tensor e = tensor_of({1.0, 2.0, 3.0}, {.dtype = dtype::float64}).expand({2, 3});
    std::vector<double> want = kSoftmax123;
    want.insert(want.end(), kSoftmax123.begin(), kSoftmax123.end());
    CHECK(close(values_of(softmax(e, 1)), want, 1e-15));
    // Stepped slice: [[0, 2], [4, 6]] along dim 1 is [a, a + 2].
    const tensor sl = arange(8, {.dtype = dtype::float64}).view({2, 4}).slice(1, 0, 4, 2);
    CHECK(close(values_of(log_softmax(sl, 1)),
                {std::log(kSig2), std::log(1 - kSig2), std::log(kSig2), std::log(1 - kSig2)},
                1e-14));
  }
}

TEST_CASE("softmax handles 0-dim, empty and 16-bit inputs", "[core][softmax]") {
  SECTION("a 0-dim tensor is a softmax over one element") {
    const tensor s = scalar_tensor(5.0);
    CHECK(softmax(s, 0).sizes() == shape_t{});
    CHECK(values_of(softmax(s, 0)) == std::vector<double>{1});
    CHECK(values_of(softmax(s, -1)) == std::vector<double>{1});
    CHECK(values_of(log_softmax(s, 0)) == std::vector<double>{0});
  }
  SECTION("empty tensors give empty results") {
    CHECK(softmax(zeros({0, 3}), 1).sizes() == shape_t{0, 3});
    CHECK(softmax(zeros({2, 0}), 1).sizes() == shape_t{2, 0});
    CHECK(log_softmax(zeros({2, 0, 3}), 0).sizes() == shape_t{2, 0, 3});
  }
  SECTION("float16 and bfloat16 compute in float and keep their dtype") {
    const tensor h = tensor_of({1.0, 2.0, 3.0}, {.dtype = dtype::float16});
    CHECK(softmax(h, 0).dtype() == dtype::float16);
    CHECK(close(values_of(softmax(h, 0)), kSoftmax123, 1e-3));
    CHECK(close(values_of(log_softmax(h, 0)), kLogSoftmax123, 1e-3));
    const tensor b = tensor_of({{1.0, 1.0}, {2.0, 3.0}}, {.dtype = dtype::bfloat16});
    CHECK(softmax(b, 0).dtype() == dtype::bfloat16);
    CHECK(close(values_of(softmax(b, 0)), {kSig1, kSig2, 1 - kSig1, 1 - kSig2}, 1e-2));
  }
}

TEST_CASE("softmax rejects integer inputs and bad dims", "[core][softmax]") {
  REQUIRE_THROWS_WITH(softmax(tensor_of({1, 2, 3}), 0),
                      Contains("softmax(): expected a floating point input but got int64"));
  REQUIRE_THROWS_WITH(log_softmax(tensor_of({true, false}), 0),
                      Contains("log_softmax(): expected a floating point input but got bool"));
  REQUIRE_THROWS_WITH(softmax(zeros({2, 3}), 2),
                      Contains("softmax(): dim 2 is out of range for a tensor with 2 dims"));
  REQUIRE_THROWS_WITH(log_softmax(zeros({2, 3}), -3),
                      Contains("log_softmax(): dim -3 is out of range"));
  REQUIRE_THROWS_WITH(softmax(scalar_tensor(1.0), 1), Contains("softmax(): dim 1 is out of range"));
  REQUIRE_THROWS_WITH(softmax(tensor(), 0), Contains("softmax(): got an undefined tensor"));
}

TEST_CASE("softmax backward matches hand-computed gradients", "[core][softmax]") {
  // softmax([0, 0]) = [0.5, 0.5]; with grad_out [1, 0], sum(g * y) = 0.5, so
  // grad_in = y * (g - 0.5) = [0.25, -0.25].
  const tensor x = zeros({2}, {.dtype = dtype::float64});
  const tensor g = tensor_of({1.0, 0.0}, {.dtype = dtype::float64});
  CHECK(values_of(softmax_backward(g, softmax(x, 0), 0)) == std::vector<double>{0.25, -0.25});
  // log_softmax([0, 0]) = [-log 2, -log 2]; sum(g) = 1, so grad_in = g - 0.5 = [0.5, -0.5].
  CHECK(close(values_of(log_softmax_backward(g, log_softmax(x, 0), 0)), {0.5, -0.5}, 1e-15));

  REQUIRE_THROWS_WITH(softmax_backward(zeros({2}), zeros({3}), 0),
                      Contains("softmax_backward(): grad_out has shape [2] but the forward "
                               "output has shape [3]"));
  REQUIRE_THROWS_WITH(log_softmax_backward(zeros({2}), zeros({2}, {.dtype = dtype::float64}), 0),
                      Contains("log_softmax_backward(): grad_out has dtype float32 but the "
                               "forward output has dtype float64"));
  REQUIRE_THROWS_WITH(softmax_backward(zeros({2}), zeros({2}), 1),
                      Contains("softmax_backward(): dim 1 is out of range"));
}

namespace {
// The gradient of L(x) = sum(w * f(x)) with respect to x, by central differences.
template <class F> tensor numeric_grad(F f, const tensor& x, const tensor& w, double h = 1e-6) {
  tensor xc = x.clone();
  tensor grad = zeros_like(x);
  double* px = xc.data_ptr<double>();
  double* pg = grad.data_ptr<double>();
  auto loss = [&] {
    const std::vector<double> y = values_of(f(xc) * w);
    double s = 0;
    for (double v : y)
      s += v;
    return s;
  };
  for (int64_t i = 0; i < xc.numel(); ++i) {
    const double keep = px[i];
    px[i] = keep + h;
    const double up = loss();
    px[i] = keep - h;
    const double down = loss();
    px[i] = keep;
    pg[i] = (up - down) / (2 * h);
  }
  return grad;
}
} // namespace

TEST_CASE("softmax backward matches central differences in float64", "[core][softmax]") {
  generator gen(1234);
  const tensor x = randn({2, 3, 4}, {.dtype = dtype::float64}, &gen);
  const tensor w = randn({2, 3, 4}, {.dtype = dtype::float64}, &gen);
  for (int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    const tensor num_s = numeric_grad([dim](const tensor& t) { return softmax(t, dim); }, x, w);
    const tensor ana_s = softmax_backward(w, softmax(x, dim), dim);
    CHECK(ana_s.sizes() == x.sizes());
    CHECK(allclose(ana_s, num_s, 1e-6, 1e-8));
    const tensor num_l = numeric_grad([dim](const tensor& t) { return log_softmax(t, dim); }, x, w);
    const tensor ana_l = log_softmax_backward(w, log_softmax(x, dim), dim);
    CHECK(allclose(ana_l, num_l, 1e-6, 1e-8));
  }
  SECTION("non-contiguous grad_out and out") {
    const tensor xt = x.transpose(0, 2); // (4, 3, 2)
    const tensor wt = w.transpose(0, 2);
    const tensor num = numeric_grad([](const tensor& t) { return softmax(t, 1); }, xt, wt);
    CHECK(allclose(softmax_backward(wt, softmax(xt, 1), 1), num, 1e-6, 1e-8));
  }
}
