// A map-style dataset over .npy files (numpy's format, core/serialize/npy.hpp): each file is
// one array whose first dimension indexes samples, e.g. {"x.npy", "y.npy"} as numpy users
// save them. Sample i is the tuple (array[i] for each file), or the row alone for one file.
#pragma once

#include <string>
#include <vector>

#include "core/data/dataset.hpp"

namespace actorch::data {

class npy_dataset : public dataset {
public:
  /// Loads every file now; throws actorch::error naming the file when it is not a valid .npy
  /// or when the files disagree on their first dimension.
  explicit npy_dataset(std::vector<std::string> paths);
  int64_t size() const override { return size_; }
  sample get(int64_t index) const override;

private:
  std::vector<std::string> paths_;
  std::vector<tensor> arrays_;
  int64_t size_ = 0;
};

} // namespace actorch::data
