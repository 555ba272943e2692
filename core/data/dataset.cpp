// The built-in map-style and iterable datasets and random_split.
#include "core/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/ops/factory.hpp"

namespace actorch::data {

std::vector<sample> dataset::get_many(const std::vector<int64_t>& indices) const {
  std::vector<sample> out;
  out.reserve(indices.size());
  for (const int64_t i : indices)
    out.push_back(get(i));
  return out;
}

void check_index(int64_t index, int64_t size, const char* who) {
  ACTORCH_CHECK(index >= 0 && index < size, who, ": index ", index,
                " out of range for a dataset of ", size, " samples");
}

tensor_dataset::tensor_dataset(std::vector<tensor> tensors) : tensors_(std::move(tensors)) {
  ACTORCH_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    ACTORCH_CHECK(tensors_[i].defined() && tensors_[i].dim() > 0, "TensorDataset: tensor ", i,
                  " has no first dimension");
    ACTORCH_CHECK(tensors_[i].size(0) == tensors_[0].size(0),
                  "TensorDataset: size mismatch between tensors (tensor 0 has ",
                  tensors_[0].size(0), " rows, tensor ", i, " has ", tensors_[i].size(0), ")");
  }
}

int64_t tensor_dataset::size() const {
  return tensors_[0].size(0);
}

sample tensor_dataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset");
  sample::tuple out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_)
    out.emplace_back(t.select(0, index));
  return sample(std::move(out));
}

concat_dataset::concat_dataset(std::vector<dataset_ptr> datasets) : datasets_(std::move(datasets)) {
  ACTORCH_CHECK(!datasets_.empty(), "ConcatDataset: datasets should not be an empty list");
  int64_t total = 0;
  for (const auto& d : datasets_) {
    ACTORCH_CHECK(d != nullptr, "ConcatDataset: null dataset");
    total += d->size();
    cumulative_.push_back(total);
  }
}

int64_t concat_dataset::size() const {
  return cumulative_.back();
}

sample concat_dataset::get(int64_t index) const {
  if (index < 0) {
    ACTORCH_CHECK(-index <= size(), "ConcatDataset: absolute value of index ", index,
                  " should not exceed dataset length ", size());
    index += size();
  }
  check_index(index, size(), "ConcatDataset");
  // The first dataset whose cumulative size exceeds index (bisect_right in PyTorch).
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), index);
  const size_t d = size_t(it - cumulative_.begin());
  const int64_t local = d == 0 ? index : index - cumulative_[d - 1];
  return datasets_[d]->get(local);
}

namespace {
class chain_iterator : public sample_iterator {
public:
  explicit chain_iterator(const std::vector<iterable_dataset_ptr>& ds) : datasets_(ds) {}
  std::optional<sample> next() override {
    while (pos_ < datasets_.size()) {
      if (!current_)
        current_ = datasets_[pos_]->iter();
      if (auto s = current_->next())
        return s;
      current_.reset();
      ++pos_;
    }
    return std::nullopt;
  }

private:
  std::vector<iterable_dataset_ptr> datasets_;
  size_t pos_ = 0;
  std::unique_ptr<sample_iterator> current_;
};
} // namespace

chain_dataset::chain_dataset(std::vector<iterable_dataset_ptr> datasets)
    : datasets_(std::move(datasets)) {
  for (const auto& d : datasets_)
    ACTORCH_CHECK(d != nullptr, "ChainDataset: null dataset");
}

std::unique_ptr<sample_iterator> chain_dataset::iter() const {
  return std::make_unique<chain_iterator>(datasets_);
}

subset::subset(dataset_ptr dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  ACTORCH_CHECK(dataset_ != nullptr, "Subset: null dataset");
  for (int64_t i : indices_)
    check_index(i, dataset_->size(), "Subset");
}

sample subset::get(int64_t index) const {
  check_index(index, size(), "Subset");
  return dataset_->get(indices_[size_t(index)]);
}

std::vector<std::shared_ptr<subset>>
random_split(const dataset_ptr& dataset, const std::vector<int64_t>& lengths, generator& gen) {
  ACTORCH_CHECK(dataset != nullptr, "random_split: null dataset");
  int64_t total = 0;
  for (int64_t l : lengths) {
    ACTORCH_CHECK(l >= 0, "random_split: negative length ", l);
    total += l;
  }
  ACTORCH_CHECK(total == dataset->size(), "random_split: sum of input lengths (", total,
                ") does not equal the length of the input dataset (", dataset->size(), ")");
  const tensor perm = randperm(total, {}, &gen);
  const int64_t* p = perm.data_ptr<int64_t>();
  std::vector<std::shared_ptr<subset>> out;
  int64_t offset = 0;
  for (int64_t l : lengths) {
    out.push_back(
        std::make_shared<subset>(dataset, std::vector<int64_t>(p + offset, p + offset + l)));
    offset += l;
  }
  return out;
}

std::vector<std::shared_ptr<subset>>
random_split(const dataset_ptr& dataset, const std::vector<double>& fractions, generator& gen) {
  ACTORCH_CHECK(dataset != nullptr, "random_split: null dataset");
  const double sum = std::accumulate(fractions.begin(), fractions.end(), 0.0);
  ACTORCH_CHECK(std::abs(sum - 1.0) < 1e-9, "random_split: fractions sum to ", sum, ", expected 1");
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  for (double f : fractions) {
    ACTORCH_CHECK(f >= 0 && f <= 1, "random_split: fraction ", f, " is not between 0 and 1");
    lengths.push_back(int64_t(std::floor(double(n) * f)));
  }
  int64_t remainder = n - std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  for (int64_t i = 0; i < remainder; ++i)
    lengths[size_t(i) % lengths.size()] += 1;
  return random_split(dataset, lengths, gen);
}

} // namespace actorch::data
