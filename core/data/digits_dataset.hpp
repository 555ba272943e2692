// The UCI optical-digits set shipped in examples/data/digits.csv.gz: gzipped CSV, one digit per
// line, 64 pixel counts (0..16, an 8x8 image row by row) then the class 0..9. Read with zlib,
// each row parsed as it is decompressed, within bounds (max_text_bytes, max_line_bytes) that a
// gzip bomb meets long before it costs memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/data/dataset.hpp"

namespace actorch::data {

class digits_dataset : public dataset {
public:
  /// The most text a file may decompress to: 16 MiB, 63 times the shipped file (264,712 bytes,
  /// 1797 rows), room for some 120,000 rows (the full UCI set has 5620).
  static constexpr uint64_t max_text_bytes = uint64_t(16) << 20;
  /// The longest line: 65 fields of up to 2 digits take under 200 bytes.
  static constexpr size_t max_line_bytes = 4096;

  /// Reads and parses the whole file; throws actorch::error naming the file for a path that is
  /// not a regular file (a FIFO, a directory, a device: refused before any read that could
  /// block), or for text past max_text_bytes, and naming the line for one longer than
  /// max_line_bytes or that is not 65 integers, a pixel outside 0..16 or a label outside 0..9.
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
