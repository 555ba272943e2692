// The image datasets through the loader: random transforms that do not depend on num_workers,
// and a bad file's error reaching the consumer with its name.
#include <catch2/catch.hpp>

#include "actors/data_loader.hpp"
#include "core/data/vision/image_folder.hpp"
#include "core/ops/reduce.hpp"
#include "tests/core/vision_tree.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::data::vision;
using Catch::Contains;
using test::image_tree;

TEST_CASE("random image transforms give the same batches whatever num_workers is",
          "[data][vision][actors]") {
  image_dataset_options o;
  o.transform = {random_resized_crop{32}, random_horizontal_flip{},
                 make_color_jitter(0.4, 0.4, 0.4, 0.1), to_tensor{},
                 normalize{{0.5, 0.4, 0.3}, {0.2, 0.2, 0.2}}};
  auto ds = std::make_shared<image_folder>(image_tree().string(), o);
  auto run = [&](int64_t workers, uint64_t seed = 7) {
    data_loader loader(ds, {.batch_size = 3,
                            .shuffle = true,
                            .num_workers = workers,
                            .generator = std::make_shared<generator>(seed)});
    std::vector<tensor> out;
    for (const auto& b : loader)
      out.push_back(b[0].as_tensor());
    return out;
  };
  const auto a = run(0), b = run(2);
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(equal(a[i], b[i]));
  CHECK_FALSE(equal(a[0], run(0, 8)[0])); // the draws are real: another seed, other crops
}

TEST_CASE("a bad image file's error reaches the consumer naming the file",
          "[data][vision][actors]") {
  const std::filesystem::path& dir = test::scratch_dir("vision_bad_loader");
  const std::string good = (image_tree() / "b_dogs" / "j0.jpg").string();
  const std::string bytes = test::read_file(good);
  const std::string cut = (dir / "cut.jpg").string();
  test::write_file(cut, bytes.substr(0, bytes.size() / 2));
  const std::vector<std::string> files{good, cut, good, good};
  auto strict_ptr =
      std::make_shared<image_files>(files, std::vector<int64_t>{}, image_dataset_options{});
  data_loader failing(strict_ptr, {.batch_size = 2, .num_workers = 2});
  CHECK_THROWS_WITH(failing.begin(), Contains("cut.jpg"));
}
