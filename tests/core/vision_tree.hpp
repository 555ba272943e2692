// A folder tree of images for the image path's tests, written once per test binary by PIL:
// root/<class>/... with PNGs of a known pattern, JPEGs of smooth colour fields, nested folders
// and a file of another kind.
#pragma once

#include <cstdint>
#include <filesystem>

#include "tests/core/files.hpp"

namespace actorch::test {

/// PNG pixel (y, x) is ((x * 3 + y * 5) % 256, (x + 7 * y) % 256, (x * y) % 256).
inline uint8_t pattern(int64_t y, int64_t x, int64_t c) {
  const int64_t v[3] = {(x * 3 + y * 5) % 256, (x + 7 * y) % 256, (x * y) % 256};
  return uint8_t(v[c]);
}

// root/<class>/...: PNGs whose pixel (y, x) is ((x * 3 + y * 5) % 256, (x + 7 * y) % 256,
// (x * y) % 256), JPEGs of smooth colour fields, nested folders and a file of another kind.
inline const std::filesystem::path& image_tree() {
  static const std::filesystem::path root = [] {
    const std::filesystem::path& dir = scratch_dir("vision_tree");
    REQUIRE(run_python(dir, "make_tree", R"(
import os, numpy as np
from PIL import Image
root = os.path.join(d, "tree")
for sub in ["b_dogs/inner", "a_cats", "c_empty_but_nested/x"]:
    os.makedirs(os.path.join(root, sub), exist_ok=True)
def pattern(h, w):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x * 3 + y * 5) % 256, (x + 7 * y) % 256, (x * y) % 256], 2).astype(np.uint8)
Image.fromarray(pattern(20, 30)).save(os.path.join(root, "a_cats", "p1.png"))
Image.fromarray(pattern(9, 4)).save(os.path.join(root, "b_dogs", "inner", "p2.PNG"))
rng = np.random.default_rng(0)
for i in range(6):
    base = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((400 + 10 * i, 300), Image.BICUBIC)
    img.save(os.path.join(root, "b_dogs", f"j{i}.jpg"), quality=90)
Image.fromarray(pattern(8, 8)).save(os.path.join(root, "c_empty_but_nested", "x", "q.png"))
open(os.path.join(root, "a_cats", "readme.txt"), "w").write("not an image")
)") == 0);
    return dir / "tree";
  }();
  return root;
}

} // namespace actorch::test
