// libFuzzer target: digits_dataset on an arbitrary file (gzip or plain, as zlib reads both).
// It is either read, every sample with its 8x8 image in 0..16 and its label in 0..9, or refused
// with actorch::error; any other exception, a crash or a sanitizer report is a bug.
// See tests/fuzz/README.md.
#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "core/data/digits_dataset.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorch;
  const std::string path = fuzz::as_file(data, size);
  try {
    data::digits_dataset ds(path);
    for (int64_t i = 0; i < ds.size(); ++i) {
      const data::sample s = ds.get(i);
      const tensor& image = s[0].as_tensor();
      fuzz::require(image.sizes() == shape_t{8, 8}, "an image is not 8x8");
      for (int64_t k = 0; k < 64; ++k) {
        const float v = image.data_ptr<float>()[k];
        fuzz::require(v >= 0 && v <= 16, "a pixel outside 0..16");
      }
      const int64_t label = s[1].as_int();
      fuzz::require(label >= 0 && label <= 9, "a label outside 0..9");
    }
  } catch (const error&) {
  }
  return 0;
}
