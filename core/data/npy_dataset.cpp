// npy_dataset: arrays loaded once, samples are views of their rows.
#include "core/data/npy_dataset.hpp"

#include "core/serialize/npy.hpp"

namespace actorch::data {

npy_dataset::npy_dataset(std::vector<std::string> paths) : paths_(std::move(paths)) {
  ACTORCH_CHECK(!paths_.empty(), "npy_dataset: needs at least one file");
  for (const auto& p : paths_) {
    tensor t = load_npy(p);
    ACTORCH_CHECK(t.dim() > 0, "npy_dataset: ", p,
                  " holds a 0-dim array; samples need a first dimension");
    if (!arrays_.empty())
      ACTORCH_CHECK(t.size(0) == size_, "npy_dataset: ", p, " has ", t.size(0), " rows but ",
                    paths_[0], " has ", size_);
    size_ = t.size(0);
    arrays_.push_back(std::move(t));
  }
}

sample npy_dataset::get(int64_t index) const {
  check_index(index, size_, "npy_dataset");
  if (arrays_.size() == 1)
    return sample(arrays_[0].select(0, index));
  sample::tuple out;
  for (const auto& a : arrays_)
    out.emplace_back(a.select(0, index));
  return sample(std::move(out));
}

} // namespace actorch::data
