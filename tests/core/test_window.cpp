// Convolution and pooling: values worked out by hand, central-difference gradient checks of
// every op (tests/python/test_window_ops.py compares them with torch on random shapes), and the
// layers' parameters, initialisation, modes and errors as torch.nn has them.
#include <cmath>

#include <catch2/catch.hpp>

#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "tests/core/gradcheck.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;
namespace F = actorch::nn::functional;

namespace {
tensor arange_image(const shape_t& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return arange(n).to(dtype::float64).reshape(shape);
}
} // namespace

TEST_CASE("conv2d, max_pool2d and avg_pool2d give hand-computed values", "[core][window]") {
  const tensor x = arange_image({1, 1, 3, 3}); // 0..8
  // A 2x2 kernel of ones sums each 2x2 block: 0+1+3+4, 1+2+4+5, ...
  const tensor w = ones({1, 1, 2, 2}, {.dtype = dtype::float64});
  CHECK(values_of(conv2d(x, w)) == std::vector<double>{8, 12, 20, 24});
  CHECK(values_of(conv2d(x, w, ones({1}, {.dtype = dtype::float64}), 2)) == std::vector<double>{9});
  // "same" with an even kernel pads one after: the last row and column see zeros.
  CHECK(values_of(conv2d(x, w, {}, 1, "same")) ==
        std::vector<double>{8, 12, 7, 20, 24, 13, 13, 15, 8});
  CHECK(values_of(max_pool2d(x, 2, 1)) == std::vector<double>{4, 5, 7, 8});
  const auto [y, idx] = max_pool2d_with_indices(x, 2, 2, 0, 1, true);
  CHECK(values_of(y) == std::vector<double>{4, 5, 7, 8});
  CHECK(values_of(idx) == std::vector<double>{4, 5, 7, 8});
  // Padding counts as zeros in the divisor by default, not with count_include_pad=false.
  CHECK(values_of(avg_pool2d(x, 2, 2, 1)) == std::vector<double>{0, 0.75, 2.25, 6});
  CHECK(values_of(avg_pool2d(x, 2, 2, 1, false, false)) == std::vector<double>{0, 1.5, 4.5, 6});
  CHECK(values_of(adaptive_avg_pool2d(x, 1)) == std::vector<double>{4});
  CHECK(values_of(adaptive_max_pool2d(x, {1, 3})) == std::vector<double>{6, 7, 8});
}

TEST_CASE("the window ops' gradients match central differences", "[core][window]") {
  generator gen(3);
  auto r = [&](const shape_t& s) { return randn(s, {.dtype = dtype::float64}, &gen); };
  gradcheck(
      [](const auto& v) {
        return conv2d(v[0], v[1], v[2], {2, 1}, {1, 2}, {1, 2}, 2);
      },
      {r({2, 4, 6, 7}), r({6, 2, 3, 2}), r({6})});
  gradcheck([](const auto& v) { return conv2d(v[0], v[1], {}, 1, "same", 2); },
            {r({1, 2, 5, 5}), r({3, 2, 2, 3})});
  gradcheck([](const auto& v) { return conv1d(v[0], v[1], v[2], 2, 1, 1, 1); },
            {r({2, 3, 9}), r({2, 3, 3}), r({2})});
  gradcheck([](const auto& v) { return unfold(v[0], {2, 3}, 1, 1, 2); }, {r({2, 2, 5, 6})});
  gradcheck([](const auto& v) { return fold(v[0], {4, 5}, 2, 1, 0, 1); }, {r({1, 8, 12})});
  gradcheck([](const auto& v) { return avg_pool2d(v[0], 3, 2, 1, true, false); },
            {r({2, 2, 7, 6})});
  gradcheck([](const auto& v) { return adaptive_avg_pool2d(v[0], {3, 4}); }, {r({1, 2, 7, 5})});
  // Max pooling is differentiable where the maximum is unique: distinct values.
  const tensor distinct = arange_image({2, 2, 7, 6}).mul(0.37);
  gradcheck([](const auto& v) { return max_pool2d(v[0], 3, 2, 1, int2(1, 2), true); }, {distinct});
  gradcheck([](const auto& v) { return adaptive_max_pool2d(v[0], {3, 2}); }, {distinct});
}

TEST_CASE("Conv2d and Conv1d have torch's parameters, initial bounds and errors",
          "[core][window][nn]") {
  generator gen(5);
  nn::conv2d conv(4, 6, {3, 2}, 1, 0, 1, 2, true, "zeros", &gen);
  CHECK(conv.weight.sizes() == shape_t{6, 2, 3, 2});
  CHECK(conv.bias.sizes() == shape_t{6});
  const double bound = 1 / std::sqrt(2.0 * 3 * 2); // fan_in = in / groups * kh * kw
  for (const tensor& p : {conv.weight, conv.bias})
    for (double v : values_of(p))
      REQUIRE(std::abs(v) <= bound);
  CHECK(conv.state_dict().size() == 2);
  CHECK(conv(randn({2, 4, 5, 5}, {}, &gen)).sizes() == shape_t{2, 6, 3, 4});
  CHECK(conv(randn({4, 5, 5}, {}, &gen)).sizes() == shape_t{6, 3, 4});
  const auto copy = std::dynamic_pointer_cast<nn::conv2d>(conv.clone());
  REQUIRE(copy);
  CHECK(values_of(copy->weight) == values_of(conv.weight));

  nn::conv1d c1(3, 4, 5, 2, "valid", 1, 1, false, "zeros", &gen);
  CHECK(c1.weight.sizes() == shape_t{4, 3, 5});
  CHECK_FALSE(c1.bias.defined());
  CHECK(c1(randn({2, 3, 11}, {}, &gen)).sizes() == shape_t{2, 4, 4});

  CHECK_THROWS_WITH(nn::conv2d(3, 4, 3, 1, 0, 1, 1, true, "reflect"),
                    Contains("padding_mode 'reflect' is not supported") && Contains("'zeros'"));
  CHECK_THROWS_WITH(nn::conv2d(3, 4, 3, 1, 0, 1, 2), Contains("in_channels must be divisible"));
  CHECK_THROWS_WITH(conv(randn({2, 3, 5, 5})), Contains("to have 4 channels, but got 3"));
  CHECK_THROWS_WITH(conv2d(randn({1, 2, 5, 5}), randn({3, 2, 3, 3}), {}, 1, "full"),
                    Contains("invalid padding string 'full'"));
}

TEST_CASE("Dropout2d drops whole channels in training only, and Flatten keeps the batch",
          "[core][window][nn]") {
  generator gen(9);
  nn::dropout2d drop(0.5, &gen);
  const tensor x = ones({8, 16, 3, 3});
  const tensor y = drop(x);
  int dropped = 0;
  for (int64_t n = 0; n < 8; ++n)
    for (int64_t c = 0; c < 16; ++c) {
      const auto v = values_of(y.select(0, n).select(0, c));
      const bool zero = v[0] == 0;
      dropped += zero;
      for (double e : v)
        REQUIRE(e == (zero ? 0.0 : 2.0)); // a channel is dropped whole; kept ones scaled by 2
    }
  CHECK(dropped > 32);
  CHECK(dropped < 96);
  drop.eval();
  CHECK(values_of(drop(x)) == values_of(x));
  CHECK_THROWS_WITH(F::dropout2d(ones({4, 4})), Contains("expected a 3-D (N, C, L) or 4-D"));

  nn::flatten flat;
  CHECK(flat(ones({2, 3, 4, 5})).sizes() == shape_t{2, 60});
  CHECK(nn::flatten(0, 1)(ones({2, 3, 4})).sizes() == shape_t{6, 4});
}
