// Datasets with knobs for the loader tests: per-worker delays, failures at chosen indices, a
// count of loads in progress, and randomness drawn through the batch generator.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "actors/data_loader.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"

namespace actorch::test {

/// Sample i: (tensor [2] = {i, i}, label i) plus the hook's effect.
class probe_dataset : public data::dataset {
public:
  explicit probe_dataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::sample get(int64_t index) const override {
    gets.fetch_add(1);
    if (hook) hook(index);
    tensor x = full({2}, double(index));
    if (noise) x.add_(rand({2}, {}, &data::batch_generator()));
    return data::sample::make_tuple({x, index});
  }
  std::function<void(int64_t)> hook; // runs first in get(): sleep, throw ...
  bool noise = false;                // add batch-generator noise (determinism tests)
  mutable std::atomic<int64_t> gets{0};

private:
  int64_t n_;
};

inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// The label column of every batch of one epoch.
inline std::vector<std::vector<int64_t>> epoch_labels(data::data_loader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : loader) {
    const tensor& y = b[1].as_tensor();
    const int64_t* p = y.data_ptr<int64_t>();
    out.emplace_back(p, p + y.numel());
  }
  return out;
}

} // namespace actorch::test
