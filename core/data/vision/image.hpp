// A decoded 8-bit image as PIL holds one after convert("RGB") or convert("L"): rows of
// interleaved channels, (height, width, channels). The unit the image path (decode, then
// torchvision's transforms on PIL images) passes between its steps before ToTensor.
#pragma once

#include <cstdint>
#include <memory>

namespace actorch::data::vision {

struct image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;              // 3 (RGB) or 1 (L)
  std::unique_ptr<uint8_t[]> pixels; // height * width * channels bytes, uninitialised at first

  image() = default;
  image(int64_t h, int64_t w, int64_t c)
      : height(h), width(w), channels(c), pixels(new uint8_t[size_t(h * w * c)]) {}

  int64_t row_bytes() const { return width * channels; }
  int64_t bytes() const { return height * width * channels; }
  uint8_t* row(int64_t y) { return pixels.get() + y * row_bytes(); }
  const uint8_t* row(int64_t y) const { return pixels.get() + y * row_bytes(); }
};

} // namespace actorch::data::vision
