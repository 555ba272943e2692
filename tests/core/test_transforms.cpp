// Per-sample transforms against hand-computed values: to_tensor's layout and scaling,
// normalize per channel, random_crop's padded windows (every offset reachable, reproducible
// from the batch generator), center_crop's rounding and padding, the flips, compose's order,
// lambda_, transformed_dataset, and the errors.
#include <numeric>
#include <set>

#include <catch2/catch.hpp>

#include "core/data/transforms.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::data::transforms;
using namespace actorch::test;
using Catch::Contains;

namespace {
using values = std::vector<double>;

// [[1, 2], [3, 4]] as a one-channel float image (1, 2, 2).
tensor image_1234() {
  return tensor_of({1.0, 2.0, 3.0, 4.0}).view({1, 2, 2});
}

// Runs t on x with the batch generator seeded with `seed`, as a loader worker would.
tensor under_seed(const transform& t, const tensor& x, uint64_t seed) {
  batch_scope scope(seed);
  return t(x);
}
} // namespace

TEST_CASE("to_tensor turns uint8 HWC into float CHW in [0, 1]", "[core][data][transforms]") {
  // pixel (h, w, c) = (2h + w) * 3 + c, so channel c holds c, 3 + c, 6 + c, 9 + c.
  const tensor hwc = arange(12, {.dtype = dtype::uint8}).view({2, 2, 3});
  const tensor chw = to_tensor(hwc);
  CHECK(chw.dtype() == dtype::float32);
  CHECK(chw.sizes() == shape_t{3, 2, 2});
  CHECK(close(values_of(chw),
              {0 / 255., 3 / 255., 6 / 255., 9 / 255., 1 / 255., 4 / 255., 7 / 255., 10 / 255.,
               2 / 255., 5 / 255., 8 / 255., 11 / 255.},
              1e-7));
  SECTION("255 is 1 and a 2-D image gets one channel") {
    const tensor g =
        to_tensor()(tensor_of({0, 255, 51, 102}, {.dtype = dtype::uint8}).view({2, 2}));
    CHECK(g.sizes() == shape_t{1, 2, 2});
    CHECK(values_of(g) == values{0.0, 1.0, double(51.0f / 255.0f), double(102.0f / 255.0f)});
  }
  SECTION("a float image is laid out as CHW, not scaled") {
    const tensor f = to_tensor(arange(6, {.dtype = dtype::float32}).view({1, 2, 3}));
    CHECK(f.sizes() == shape_t{3, 1, 2});
    CHECK(values_of(f) == values{0, 3, 1, 4, 2, 5});
  }
  CHECK_THROWS_WITH(to_tensor(zeros({2, 2, 2, 2})),
                    Contains("expected an image (H, W) or (H, W, C) but got shape [2, 2, 2, 2]"));
}

TEST_CASE("normalize subtracts the mean and divides by the std of each channel",
          "[core][data][transforms]") {
  // Channel 0: [1, 3] -> ([1, 3] - 1) / 2 = [0, 1]; channel 1: [2, 10] -> ([2, 10] - 2) / 4.
  const tensor x = tensor_of({1.0, 3.0, 2.0, 10.0}).view({2, 1, 2});
  CHECK(values_of(normalize({1, 2}, {2, 4})(x)) == values{0, 1, 0, 2});
  CHECK(normalize(x, {1, 2}, {2, 4}).sizes() == shape_t{2, 1, 2});
  SECTION("one value for every channel, a batch of images, float64") {
    const tensor b = x.to(dtype::float64).unsqueeze(0).expand({2, 2, 1, 2});
    const tensor n = normalize(b, {1}, {0.5});
    CHECK(n.dtype() == dtype::float64);
    CHECK(values_of(n) == values{0, 4, 2, 18, 0, 4, 2, 18});
  }
  SECTION("the input is left alone") {
    const tensor y = x.clone();
    normalize(y, {1, 2}, {2, 4});
    CHECK(values_of(y) == values{1, 3, 2, 10});
  }
  CHECK_THROWS_WITH(normalize({0.5}, {0.0}), Contains("std[0] is 0"));
  CHECK_THROWS_WITH(normalize(x, {1, 2, 3}, {1}),
                    Contains("mean has 3 values but the image has 2 channels"));
  CHECK_THROWS_WITH(normalize(x.to(dtype::int64), {1}, {1}),
                    Contains("expected a floating image but got int64"));
  CHECK_THROWS_WITH(normalize(zeros({4, 4}), {1}, {1}),
                    Contains("expected an image with at least 3 dims but got 2"));
}

TEST_CASE("random_crop takes a window of the padded image at a random offset",
          "[core][data][transforms]") {
  // [[1, 2], [3, 4]] padded by 1 with zeros is 4x4; its nine 2x2 windows, by offset (i, j):
  const std::set<values> windows = {
      {0, 0, 0, 1}, {0, 0, 1, 2}, {0, 0, 2, 0}, // i = 0
      {0, 1, 0, 3}, {1, 2, 3, 4}, {2, 0, 4, 0}, // i = 1
      {0, 3, 0, 0}, {3, 4, 0, 0}, {4, 0, 0, 0}, // i = 2
  };
  const transform crop = random_crop(2, {.padding = {1}});
  std::set<values> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const tensor c = under_seed(crop, image_1234(), seed);
    REQUIRE(c.sizes() == shape_t{1, 2, 2});
    CHECK(windows.count(values_of(c)) == 1);
    seen.insert(values_of(c));
  }
  CHECK(seen == windows); // every offset is reachable
  // The offset comes from the batch generator: the same seed, the same window.
  for (uint64_t seed : {3u, 11u, 42u})
    CHECK(values_of(under_seed(crop, image_1234(), seed)) ==
          values_of(under_seed(crop, image_1234(), seed)));

  SECTION("asymmetric padding (left, top, right, bottom) and a fill value") {
    // Only one 2x3 window fits the image padded by one column on the left.
    const transform c = random_crop({2, 3}, {.padding = {1, 0, 0, 0}, .fill = 9});
    CHECK(values_of(under_seed(c, image_1234(), 1)) == values{9, 1, 2, 9, 3, 4});
    // (left/right, top/bottom): one row above and below, no columns -> rows 0-1 or 1-2 or 2-3.
    const transform r = random_crop({3, 2}, {.padding = {0, 1}});
    const std::set<values> tall = {{0, 0, 1, 2, 3, 4}, {1, 2, 3, 4, 0, 0}};
    for (uint64_t seed = 0; seed < 20; ++seed)
      CHECK(tall.count(values_of(under_seed(r, image_1234(), seed))) == 1);
  }
  SECTION("every channel gets the same window") {
    const tensor two = tensor_of({1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0}).view({2, 2, 2});
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const values v = values_of(under_seed(crop, two, seed));
      CHECK(values(v.begin() + 4, v.end()) == values{v[0] * 10, v[1] * 10, v[2] * 10, v[3] * 10});
    }
  }
  SECTION("no padding and the image's own size: the image, nothing drawn") {
    batch_scope scope(5);
    const auto before = batch_generator().get_state();
    CHECK(values_of(random_crop(2)(image_1234())) == values{1, 2, 3, 4});
    CHECK(batch_generator().get_state() == before);
  }
  SECTION("pad_if_needed pads a small image up to the crop") {
    const tensor c = under_seed(random_crop(3, {.pad_if_needed = true}), image_1234(), 0);
    CHECK(c.sizes() == shape_t{1, 3, 3});
    const values v = values_of(c);
    CHECK(std::accumulate(v.begin(), v.end(), 0.0) >= 1.0); // some of the image is inside
  }
  CHECK_THROWS_WITH(random_crop(3)(image_1234()),
                    Contains("the crop (3, 3) is larger than the padded image (2, 2)"));
  CHECK_THROWS_WITH(random_crop(2, {.padding = {1, 2, 3}}),
                    Contains("padding takes 1, 2 or 4 values but got 3"));
  CHECK_THROWS_WITH(random_crop(0), Contains("size must be positive but got (0, 0)"));
}

TEST_CASE("center_crop takes the centre, rounding half to even, padding small images",
          "[core][data][transforms]") {
  // 4x5 image 0..19: top = round(2 / 2) = 1, left = round(3 / 2) = 2 (1.5 to even).
  const tensor x = arange(20, {.dtype = dtype::float32}).view({1, 4, 5});
  CHECK(values_of(center_crop(2)(x)) == values{7, 8, 12, 13});
  // 4x4 image, 1x1 crop: round(1.5) = 2 both ways -> element (2, 2) = 10.
  CHECK(values_of(center_crop(1)(arange(16, {.dtype = dtype::float32}).view({1, 4, 4}))) ==
        values{10});
  // 5x6 image, 1x1 crop: top = round(2) = 2, left = round(2.5) = 2 -> element (2, 2) = 14.
  CHECK(values_of(center_crop({1, 1})(arange(30, {.dtype = dtype::float32}).view({1, 5, 6}))) ==
        values{14});
  SECTION("a crop larger than the image pads with zeros around it") {
    CHECK(values_of(center_crop(4)(image_1234())) ==
          values{0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0});
    // An odd difference puts the extra row and column after the image.
    CHECK(values_of(center_crop(3)(image_1234())) == values{1, 2, 0, 3, 4, 0, 0, 0, 0});
  }
}

TEST_CASE("random_horizontal_flip reverses the last dim with probability p",
          "[core][data][transforms]") {
  const tensor x = tensor_of({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}).view({1, 2, 3});
  const values flipped = {3, 2, 1, 6, 5, 4};
  CHECK(values_of(hflip(x)) == flipped);
  CHECK(values_of(hflip(x.to(dtype::uint8))) == flipped);
  CHECK(values_of(under_seed(random_horizontal_flip(1.0), x, 0)) == flipped);
  CHECK(values_of(under_seed(random_horizontal_flip(0.0), x, 0)) == values_of(x));
  int flips = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const values v = values_of(under_seed(random_horizontal_flip(), x, seed));
    CHECK((v == flipped || v == values_of(x)));
    flips += v == flipped;
    CHECK(v == values_of(under_seed(random_horizontal_flip(), x, seed)));
  }
  CHECK(flips > 150); // p = 0.5: 200 expected, sd 10
  CHECK(flips < 250);
  CHECK_THROWS_WITH(random_horizontal_flip(1.5), Contains("p must be in [0, 1] but got 1.5"));
}

TEST_CASE("compose applies the transforms in order, and lambda_ wraps user code",
          "[core][data][transforms]") {
  const transform add1 = lambda_([](const tensor& t) { return t.add(1); });
  const transform twice = lambda_([](const tensor& t) { return t.mul(2); });
  CHECK(values_of(compose({add1, twice})(tensor_of({1.0}))) == values{4}); // (1 + 1) * 2
  CHECK(values_of(compose({twice, add1})(tensor_of({1.0}))) == values{3}); // 1 * 2 + 1
  CHECK(values_of(compose({})(tensor_of({1.0}))) == values{1});
  // The usual image chain: uint8 HWC -> [0, 1] -> normalized -> flipped.
  const tensor img = tensor_of({0, 51, 255, 102}, {.dtype = dtype::uint8}).view({1, 4, 1});
  const tensor out = under_seed(
      compose({to_tensor(), normalize({0.5}, {0.5}), random_horizontal_flip(1.0)}), img, 0);
  CHECK(out.sizes() == shape_t{1, 1, 4});
  CHECK(
      close(values_of(out), {(102 / 255. - 0.5) / 0.5, 1.0, (51 / 255. - 0.5) / 0.5, -1.0}, 1e-6));
  CHECK_THROWS_WITH(compose({add1, transform{}}), Contains("transform 1 is empty"));
}

TEST_CASE("transformed_dataset applies transform and target_transform in get()",
          "[core][data][transforms]") {
  const tensor images = arange(8, {.dtype = dtype::float32}).view({2, 1, 2, 2});
  const tensor labels = tensor_of({int64_t(3), int64_t(5)});
  auto base = std::make_shared<tensor_dataset>(std::vector<tensor>{images, labels});
  const transformed_dataset ds(base, normalize({1}, {2}),
                               lambda_([](const tensor& y) { return y.add(10); }));
  CHECK(ds.size() == 2);
  const sample s = ds.get(1);
  CHECK(values_of(s[0].as_tensor()) == values{1.5, 2, 2.5, 3}); // ([4, 5, 6, 7] - 1) / 2
  CHECK(ints_of(s[1].as_tensor()) == std::vector<int64_t>{15});
  SECTION("a one-tensor dataset") {
    auto bare = std::make_shared<tensor_dataset>(std::vector<tensor>{images});
    const transformed_dataset only(bare, hflip);
    CHECK(values_of(only.get(0)[0].as_tensor()) == values{1, 0, 3, 2});
  }
  CHECK_THROWS_WITH(transformed_dataset(nullptr, hflip), Contains("the dataset is null"));
  CHECK_THROWS_WITH(transformed_dataset(base, {}), Contains("give a transform"));
}

TEST_CASE("resize interpolates bilinearly as torch does, values computed by hand",
          "[core][data][transforms]") {
  // Upsampling 2 -> 4 along each dim (source coordinates 0, 0.25, 0.75, 1 after the clamp):
  // rows [0, 10] and [20, 30] give [0, 2.5, 7.5, 10] and [20, 22.5, 27.5, 30], then mixed
  // 1 : 0, 0.75 : 0.25, 0.25 : 0.75 and 0 : 1 down the columns. With or without antialias,
  // which changes nothing when growing.
  const tensor img = tensor_of({{0.0, 10.0}, {20.0, 30.0}}).view({1, 2, 2});
  const values up = {0, 2.5, 7.5, 10, 5, 7.5, 12.5, 15, 15, 17.5, 22.5, 25, 20, 22.5, 27.5, 30};
  for (const bool aa : {false, true}) {
    const tensor out = resize(img, {4, 4}, {.antialias = aa});
    CHECK(out.sizes() == shape_t{1, 4, 4});
    CHECK(out.dtype() == dtype::float32);
    CHECK(close(values_of(out), up, 1e-5));
  }
  // Shrinking 4 -> 2: plain bilinear samples at 0.5 and 2.5; antialias averages with the
  // triangle filter stretched to 2 pixels: (0.75 a + 0.75 b + 0.25 c) / 1.75 at each end.
  const tensor line = tensor_of({0.0, 10.0, 20.0, 30.0}).view({1, 1, 4});
  CHECK(close(values_of(resize(line, {1, 2}, {.antialias = false})), {5, 25}, 1e-5));
  CHECK(close(values_of(resize(line, {1, 2})), {12.5 / 1.75, 40 / 1.75}, 1e-5));
  // Same size: the image itself.
  CHECK(close(values_of(resize(img, {2, 2})), {0, 10, 20, 30}));
}

TEST_CASE("resize's output size follows torchvision: the shorter edge, truncation, max_size",
          "[core][data][transforms]") {
  CHECK(resized_size(10, 15, {4}) == std::pair<int64_t, int64_t>{4, 6});
  CHECK(resized_size(15, 10, {7}) == std::pair<int64_t, int64_t>{10, 7}); // int(10.5)
  CHECK(resized_size(8, 8, {3}) == std::pair<int64_t, int64_t>{3, 3});
  CHECK(resized_size(10, 15, {4, 5}) == std::pair<int64_t, int64_t>{4, 5});
  // The longer edge would be 30 > 20: it becomes 20, the shorter int(20 * 10 / 30) = 6.
  CHECK(resized_size(10, 30, {10}, 20) == std::pair<int64_t, int64_t>{6, 20});
  const tensor img = zeros({3, 10, 15});
  CHECK(resize({4})(img).sizes() == shape_t{3, 4, 6});
  CHECK(resize(zeros({2, 3, 5, 5}), {2, 3}).sizes() == shape_t{2, 3, 2, 3}); // a batch too
  REQUIRE_THROWS_WITH(resize({0}), Contains("resize: size must be positive but got 0"));
  REQUIRE_THROWS_WITH(resize({1, 2, 3}),
                      Contains("size must be {shorter edge} or {height, width}"));
  REQUIRE_THROWS_WITH(
      resize({10}, {.max_size = 10}),
      Contains("max_size = 10 must be strictly greater than the requested size 10"));
  REQUIRE_THROWS_WITH(resize({4, 4}, {.max_size = 10}), Contains("max_size applies only"));
  REQUIRE_THROWS_WITH(resize(zeros({0, 4}), {2}), Contains("cannot resize an empty image"));
}

TEST_CASE("resize rounds integer images half to even, as torchvision before its cast",
          "[core][data][transforms]") {
  // [0, 2] grown to 4: 0, 0.5, 1.5, 2, rounded to 0, 0, 2, 2.
  const tensor img = as_tensor(std::vector<uint8_t>{0, 2}, {1, 1, 2});
  const tensor out = resize(img, {1, 4});
  CHECK(out.dtype() == dtype::uint8);
  CHECK(values_of(out) == values{0, 0, 2, 2});
  // Within the range of the type at its ends.
  const tensor hi = as_tensor(std::vector<uint8_t>{255, 0, 255, 0}, {1, 2, 2});
  for (double v : values_of(resize(hi, {3, 3})))
    CHECK((v >= 0 && v <= 255));
}
