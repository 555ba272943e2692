// Tests of the image path in C++ (core/data/vision): ImageFolder's listing, decoding against
// pixels written by PIL, bad files, the steps' checks and forms, and the fused decode (through
// the loader: tests/actors/test_image_loader.cpp). The comparisons with torchvision itself,
// transform by transform, are in tests/python/test_images.py.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/data/vision/decode.hpp"
#include "core/data/vision/image_folder.hpp"
#include "core/ops/reduce.hpp"
#include "tests/core/vision_tree.hpp"

using namespace actorch;
using namespace actorch::data;
using namespace actorch::data::vision;
using Catch::Contains;
using test::image_tree;
using test::pattern;

TEST_CASE("image_folder lists classes and files in torchvision's order", "[data][vision]") {
  const std::string root = image_tree().string();
  image_folder ds(root, {});
  REQUIRE(ds.classes() == std::vector<std::string>{"a_cats", "b_dogs", "c_empty_but_nested"});
  CHECK(ds.class_to_idx().at("b_dogs") == 1);
  std::vector<std::string> names;
  for (const auto& p : ds.paths())
    names.push_back(std::filesystem::relative(p, root).string());
  // Classes in order; within one, its own folder's files before its subfolders' (os.walk
  // sorted by folder), files sorted; .PNG counts (case-insensitive), readme.txt does not.
  CHECK(names == std::vector<std::string>{"a_cats/p1.png", "b_dogs/j0.jpg", "b_dogs/j1.jpg",
                                          "b_dogs/j2.jpg", "b_dogs/j3.jpg", "b_dogs/j4.jpg",
                                          "b_dogs/j5.jpg", "b_dogs/inner/p2.PNG",
                                          "c_empty_but_nested/x/q.png"});
  CHECK(ds.labels() == std::vector<int64_t>{0, 1, 1, 1, 1, 1, 1, 1, 2});
  CHECK_THROWS_WITH(image_folder(root + "/a_cats", {}),
                    Contains("Couldn't find any class folder in"));
  CHECK_THROWS_WITH(image_folder(root, {}, {".gif"}),
                    Contains("Found no valid file for the classes a_cats, b_dogs, "
                             "c_empty_but_nested. Supported extensions are: .gif"));
}

TEST_CASE("decoding a PNG gives the pixels PIL wrote, and the sample is (image, class)",
          "[data][vision]") {
  image_folder ds(image_tree().string(), {});
  const sample s = ds.get(0);
  const tensor img = s[0].as_tensor();
  REQUIRE(img.sizes() == shape_t{20, 30, 3});
  REQUIRE(img.dtype() == dtype::uint8);
  const uint8_t* p = img.data_ptr<uint8_t>();
  for (int64_t y = 0; y < 20; ++y)
    for (int64_t x = 0; x < 30; ++x)
      for (int64_t c = 0; c < 3; ++c)
        REQUIRE(p[(y * 30 + x) * 3 + c] == pattern(y, x, c));
  CHECK(s[1].as_tensor().item<int64_t>() == 0);
}

TEST_CASE("steps act on the decoded image as torchvision's on a PIL image", "[data][vision]") {
  const std::vector<uint8_t> bytes = read_file((image_tree() / "a_cats" / "p1.png").string());
  // A crop then ToTensor: float (C, H, W) of the crop's bytes / 255, exactly.
  const tensor t = load({center_crop{{4, 6}}, to_tensor{}}, bytes.data(), bytes.size(), "p1.png");
  REQUIRE(t.sizes() == shape_t{3, 4, 6});
  const float* f = t.data_ptr<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 6; ++x)
        REQUIRE(f[(c * 4 + y) * 6 + x] == float(pattern(y + 8, x + 12, c)) / 255.0f);
  // A tensor step before ToTensor gets the image as uint8 (H, W, C).
  shape_t seen;
  const tensor_step probe{[&](const tensor& x) {
                            seen = x.sizes();
                            return x;
                          },
                          "probe"};
  (void)load({resize{{10, 15}}, probe}, bytes.data(), bytes.size(), "p1.png");
  CHECK(seen == shape_t{10, 15, 3});
  // Normalize on an image, and ColorJitter on a tensor, say what to do instead.
  CHECK_THROWS_WITH(load({normalize{{0.5}, {0.5}}}, bytes.data(), bytes.size(), "p1.png"),
                    Contains("put ToTensor before Normalize"));
  CHECK_THROWS_WITH(
      load({to_tensor{}, make_color_jitter(0.4, 0, 0, 0)}, bytes.data(), bytes.size(), "p1.png"),
      Contains("ColorJitter: on a tensor is not supported"));
}

TEST_CASE("steps check their arguments as torchvision's constructors", "[data][vision]") {
  CHECK_THROWS_WITH(check_step(random_resized_crop{224, {1.0, 0.5}}),
                    Contains("scale and ratio should be of kind (min, max)"));
  CHECK_THROWS_WITH(check_step(resize{{32, 32}, interpolation::bilinear, 40}),
                    Contains("max_size should only be passed if size specifies the length of "
                             "the smaller edge"));
  CHECK_THROWS_WITH(check_step(normalize{{0.5, 0.5}, {0.2, 0.0}}), Contains("std[1] is 0"));
  CHECK_THROWS_WITH(check_step(grayscale{2}), Contains("num_output_channels should be either 1 "
                                                       "or 3 but got 2"));
  CHECK_THROWS_WITH(make_color_jitter(0, 0, 0, 0.6), Contains("hue values should be between"));
  CHECK_THROWS_WITH(image_files({"x.jpg"}, {}, {.transform = {center_crop{0}}}),
                    Contains("CenterCrop: size must be positive"));
}

TEST_CASE("a bad file is an error naming it, or skipped and counted", "[data][vision]") {
  const std::filesystem::path& dir = test::scratch_dir("vision_bad");
  const std::string good = (image_tree() / "b_dogs" / "j0.jpg").string();
  const std::string bytes = test::read_file(good);
  const std::string cut = (dir / "cut.jpg").string(), junk = (dir / "junk.png").string();
  test::write_file(cut, bytes.substr(0, bytes.size() / 2));
  test::write_file(junk, "GIF89a not really");
  const std::vector<std::string> files{good, cut, junk, good};
  image_files strict(files, {}, {});
  CHECK_THROWS_WITH(strict.get(1), Contains("cut.jpg: JPEG data is truncated"));
  CHECK_THROWS_WITH(strict.get(2), Contains("junk.png: not a JPEG or PNG image"));
  CHECK_THROWS_WITH(image_files({(dir / "missing.jpg").string()}, {}, {}).get(0),
                    Contains("missing.jpg: No such file or directory"));
  image_files lenient(files, {}, {.transform = {resize{{8, 8}}}, .skip_bad_files = true});
  for (int64_t i = 0; i < lenient.size(); ++i)
    CHECK(lenient.get(i).as_tensor().sizes() == shape_t{8, 8, 3});
  CHECK(lenient.bad_files() == std::vector<std::string>{cut, junk});
}

TEST_CASE("the fused decode keeps the unfused draws and stays close to its pixels",
          "[data][vision]") {
  // RandomResizedCrop(32) from 400 px images: the crop is decoded at 1/2 to 1/8 scale.
  const std::vector<step> steps{random_resized_crop{32}, random_horizontal_flip{}, to_tensor{}};
  for (int i = 0; i < 6; ++i) {
    const std::vector<uint8_t> bytes =
        read_file((image_tree() / "b_dogs" / ("j" + std::to_string(i) + ".jpg")).string());
    generator& g = default_generator();
    g.manual_seed(uint64_t(i));
    const tensor fused = load(steps, bytes.data(), bytes.size(), "j.jpg", true);
    const generator::state after_fused = g.get_state();
    g.manual_seed(uint64_t(i));
    const tensor plain = load(steps, bytes.data(), bytes.size(), "j.jpg", false);
    CHECK(g.get_state() == after_fused); // the same draws, in the same number
    const double mean_levels = (fused - plain).abs().mean().item<double>() * 255;
    CHECK(mean_levels < 3.0);
  }
}
