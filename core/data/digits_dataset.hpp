// The UCI optical-digits set shipped in examples/data/digits.csv.gz: gzipped CSV, one digit per
// line, 64 pixel counts (0..16, an 8x8 image row by row) then the class 0..9. Read with zlib.
#pragma once

#include <string>

#include "core/data/dataset.hpp"

namespace actorch::data {

class digits_dataset : public dataset {
public:
  /// Reads and parses the whole file; throws actorch::error naming the file and the line for
  /// a line that is not 65 integers, a pixel outside 0..16 or a label outside 0..9.
  explicit digits_dataset(const std::string& path);
  int64_t size() const override { return images_.size(0); }
  /// (image float32 [8, 8] with values in 0..16, label int).
  sample get(int64_t index) const override;
  const tensor& images() const { return images_; }
  const tensor& labels() const { return labels_; }

private:
  tensor images_; // [N, 8, 8] float32
  tensor labels_; // [N] int64
};

} // namespace actorch::data
