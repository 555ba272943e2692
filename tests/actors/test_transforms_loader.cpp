// Random per-sample transforms inside the loader's workers: the augmented batches are the same
// whatever num_workers is, because each draw comes from the batch's generator.
#include <catch2/catch.hpp>

#include "core/data/transforms.hpp"
#include "core/ops/factory.hpp"
#include "tests/actors/loader_fixtures.hpp"

using namespace actorch;
using namespace actorch::data;
namespace tf = actorch::data::transforms;

TEST_CASE("random transforms give the same batches whatever num_workers is",
          "[actors][loader][transforms]") {
  // 24 uint8 HWC images 6x6x3 of random pixels, labelled 0..23.
  generator pixels(1);
  const tensor images = randint(0, 256, {24, 6, 6, 3}, {.dtype = dtype::uint8}, &pixels);
  auto base = std::make_shared<tensor_dataset>(
      std::vector<tensor>{images, arange(24, {.dtype = dtype::int64})});
  auto ds = std::make_shared<tf::transformed_dataset>(
      base, tf::compose({tf::to_tensor(), tf::normalize({0.5, 0.4, 0.3}, {0.2, 0.25, 0.3}),
                         tf::random_crop(6, {.padding = {2}}), tf::random_horizontal_flip()}));
  const auto runs = actorch::test::two_epochs_per_num_workers(ds, 5, 3, {0, 2});
  REQUIRE(runs[0].size() == 10);
  REQUIRE(runs[1].size() == runs[0].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    CHECK(runs[0][i][0].as_tensor().sizes() == shape_t{i % 5 == 4 ? 4 : 5, 3, 6, 6});
    CHECK(equal(runs[1][i], runs[0][i]));
  }
  // The augmentation is real: the same image in two epochs comes out differently (a crop
  // offset, or a flip, differs for at least one of the 24).
  auto by_label = [](const std::vector<sample>& batches, size_t first) {
    std::vector<tensor> out(24);
    for (size_t b = first; b < first + 5; ++b) {
      const tensor& x = batches[b][0].as_tensor();
      const tensor& y = batches[b][1].as_tensor();
      for (int64_t k = 0; k < y.numel(); ++k)
        out[size_t(y.data_ptr<int64_t>()[k])] = x[k];
    }
    return out;
  };
  const auto e0 = by_label(runs[0], 0), e1 = by_label(runs[0], 5);
  int differ = 0;
  for (size_t k = 0; k < 24; ++k)
    differ += !equal(sample(e0[k]), sample(e1[k]));
  CHECK(differ > 12);
}
