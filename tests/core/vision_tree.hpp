// A folder tree of images for the image path's tests, written once by PIL:
// root/<class>/... with PNGs of a known pattern, JPEGs of smooth colour fields, nested folders
// and a file of another kind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#include "tests/core/files.hpp"

namespace actorch::test {

/// PNG pixel (y, x) is ((x * 3 + y * 5) % 256, (x + 7 * y) % 256, (x * y) % 256).
inline uint8_t pattern(int64_t y, int64_t x, int64_t c) {
  const int64_t v[3] = {(x * 3 + y * 5) % 256, (x + 7 * y) % 256, (x * y) % 256};
  return uint8_t(v[c]);
}

// root/<class>/...: PNGs whose pixel (y, x) is ((x * 3 + y * 5) % 256, (x + 7 * y) % 256,
// (x * y) % 256), JPEGs of smooth colour fields, nested folders and a file of another kind.
// ctest runs test cases side by side, each its own process: each writes the tree in a folder
// of its own and renames it into place, so that none reads a tree another is writing (a
// reader once met an empty JPEG); the first rename wins and the others' copies go.
inline const std::filesystem::path& image_tree() {
  static const std::filesystem::path root = [] {
    const std::filesystem::path& base = scratch_dir("vision_tree");
    const std::filesystem::path tree = base / "tree";
    if (std::filesystem::exists(tree))
      return tree;
    const std::filesystem::path dir = base / ("staging." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
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
    std::error_code taken; // another process's tree is in place: the same pixels
    std::filesystem::rename(dir / "tree", tree, taken);
    std::filesystem::remove_all(dir);
    return tree;
  }();
  return root;
}

} // namespace actorch::test
