// Datasets with knobs for the loader tests: per-worker delays, failures at chosen indices, a
// count of loads in progress, and randomness drawn through the batch generator; and an
// iterable range that can split itself between the loader's workers, with the order PyTorch
// delivers its batches in.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/data_loader.hpp"
#include "actors/messages.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"

namespace actorch::test {

/// A deadline for the fork-mode loaders whose test is not about deadlines. fork() copies one
/// thread: a lock another thread held then stays held in the child (Note [Worker processes]).
/// glibc's malloc takes care of its own, but GCC 12's AddressSanitizer allocator does not (a
/// child hung once in 15 TSan runs too, and a CI ASan run met one in test_data_loader.cpp): a
/// child forked while another thread allocates can hang in its first allocation; with a
/// deadline it is killed and replaced, as any hung worker process is.
inline constexpr double kHeal = 20;

/// Sample i: (tensor [2] = {i, i}, label i) plus the hook's effect.
class probe_dataset : public data::dataset {
public:
  explicit probe_dataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::sample get(int64_t index) const override {
    gets.fetch_add(1);
    if (hook)
      hook(index);
    tensor x = full({2}, double(index));
    if (noise)
      x.add_(rand({2}, {}, &data::batch_generator()));
    return data::sample::make_tuple({x, index});
  }
  std::function<void(int64_t)> hook; // runs first in get(): sleep, throw ...
  bool noise = false;                // add batch-generator noise (determinism tests)
  mutable std::atomic<int64_t> gets{0};

private:
  int64_t n_;
};

/// An iterable stream of samples (tensor [2] = {i, i}, label i) for i in [0, n) (n < 0: no end).
/// With `split`, a worker yields only the i with i % num_workers == id (PyTorch's documented
/// way of splitting an IterableDataset); without, every worker yields the whole stream.
/// `lengths[id]`, when given, cuts worker id's stream after that many samples (uneven streams).
class range_iterable : public data::iterable_dataset {
public:
  range_iterable(int64_t n, bool split) : n_(n), split_(split) {}
  std::unique_ptr<data::sample_iterator> iter() const override {
    int64_t start = 0, step = 1;
    if (const data::worker_info* w = data::get_worker_info()) {
      ACTORCH_CHECK(w->iterable_dataset.get() == this && !w->dataset,
                    "worker info names another dataset");
      if (split_) {
        start = w->id;
        step = w->num_workers;
      }
    }
    int64_t length = -1;
    if (const data::worker_info* w = data::get_worker_info(); w && size_t(w->id) < lengths.size())
      length = lengths[size_t(w->id)];
    return std::make_unique<iterator>(this, start, step, length);
  }
  std::function<void(int64_t)> hook; // runs before yielding i: sleep, throw ...
  std::function<void()> at_end;      // runs as an iterator finds its end: sleep ...
  bool noise = false;                // add batch-generator noise (determinism tests)
  std::vector<int64_t> lengths;      // per worker id: samples before its stream ends
  mutable std::atomic<int64_t> pulled{0};

private:
  class iterator : public data::sample_iterator {
  public:
    iterator(const range_iterable* ds, int64_t start, int64_t step, int64_t length)
        : ds_(ds), i_(start), step_(step), left_(length) {}
    std::optional<data::sample> next() override {
      if ((ds_->n_ >= 0 && i_ >= ds_->n_) || left_ == 0) {
        if (ds_->at_end)
          ds_->at_end();
        return std::nullopt;
      }
      const int64_t i = i_;
      i_ += step_;
      --left_;
      if (ds_->hook)
        ds_->hook(i);
      ds_->pulled.fetch_add(1);
      tensor x = full({2}, double(i));
      if (ds_->noise)
        x.add_(rand({2}, {}, &data::batch_generator()));
      return data::sample::make_tuple({x, i});
    }

  private:
    const range_iterable* ds_;
    int64_t i_, step_, left_;
  };
  int64_t n_;
  bool split_;
};

/// What PyTorch delivers for range_iterable(n, split) with batch_size bs: each worker's stream
/// cut into batches (its short last one dropped with drop_last), the workers' batches taken
/// round-robin, an exhausted worker dropping out.
inline std::vector<std::vector<int64_t>> round_robin(int64_t n, int64_t workers, bool split,
                                                     int64_t bs, bool drop_last) {
  const int64_t w_count = std::max<int64_t>(1, workers);
  std::vector<std::vector<std::vector<int64_t>>> per_worker(static_cast<size_t>(w_count));
  for (int64_t w = 0; w < w_count; ++w) {
    std::vector<int64_t> stream;
    for (int64_t i = 0; i < n; ++i)
      if (!(split && workers > 0) || i % w_count == w)
        stream.push_back(i);
    for (size_t k = 0; k < stream.size(); k += size_t(bs)) {
      std::vector<int64_t> b(stream.begin() + long(k),
                             stream.begin() + long(std::min(stream.size(), k + size_t(bs))));
      if (drop_last && int64_t(b.size()) < bs)
        break;
      per_worker[size_t(w)].push_back(b);
    }
  }
  std::vector<std::vector<int64_t>> out;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& batches : per_worker)
      if (round < batches.size()) {
        out.push_back(batches[round]);
        any = true;
      }
    if (!any)
      return out;
  }
}

/// Resumes `second` from `saved` and checks the run: with `seen` (what the epoch gave before the
/// save) it gives every batch of `reference_e1` exactly once (in its order when `in_order`),
/// then a next epoch like `reference_e2` (compared in order when `in_order`).
inline void check_resume(data::data_loader& second, const data::loader_state& saved,
                         std::vector<data::sample> seen,
                         const std::vector<data::sample>& reference_e1,
                         const std::vector<data::sample>& reference_e2, bool in_order) {
  second.load_state(saved);
  for (const auto& b : second)
    seen.push_back(b);
  std::vector<data::sample> e2;
  for (const auto& b : second)
    e2.push_back(b);
  REQUIRE(seen.size() == reference_e1.size());
  for (const auto& want : reference_e1)
    CHECK(std::count_if(seen.begin(), seen.end(),
                        [&](const data::sample& s) { return data::equal(s, want); }) == 1);
  for (size_t i = 0; i < seen.size() && in_order; ++i)
    CHECK(data::equal(seen[i], reference_e1[i]));
  REQUIRE(e2.size() == reference_e2.size());
  for (size_t i = 0; i < e2.size() && in_order; ++i)
    CHECK(data::equal(e2[i], reference_e2[i]));
}

inline void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The epoch's labels, batch after batch, in one list.
inline std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches)
    out.insert(out.end(), b.begin(), b.end());
  return out;
}

/// The state of `loader` after its consumer took `batches` batches of a new epoch and left the
/// loop there (the loader is then abandoned or destroyed by the caller).
inline data::loader_state state_after(data::data_loader& loader, int batches) {
  int n = 0;
  for (const auto& b : loader) {
    (void)b;
    if (++n == batches)
      break;
  }
  return loader.state();
}

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

/// For each num_workers in `workers`: every batch of two epochs of a shuffled loader over `ds`
/// (`batch_size`, its generator seeded with `seed`), in delivery order.
inline std::vector<std::vector<data::sample>>
two_epochs_per_num_workers(const data::dataset_ptr& ds, int64_t batch_size, uint64_t seed,
                           std::initializer_list<int64_t> workers) {
  std::vector<std::vector<data::sample>> runs;
  for (int64_t w : workers) {
    data::data_loader loader(ds, {.batch_size = batch_size,
                                  .shuffle = true,
                                  .num_workers = w,
                                  .generator = std::make_shared<generator>(seed)});
    std::vector<data::sample> batches;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (const auto& b : loader)
        batches.push_back(b);
    runs.push_back(std::move(batches));
  }
  return runs;
}

/// One epoch of `loader` up to its error: the batches delivered before it, and its message
/// (empty if the epoch ended without one).
struct epoch_failure {
  int batches = 0;
  std::string message;
};
inline epoch_failure run_until_error(data::data_loader& loader) {
  epoch_failure out;
  try {
    for (const auto& b : loader) {
      (void)b;
      ++out.batches;
    }
  } catch (const actorch::error& e) {
    out.message = e.what();
  }
  return out;
}

/// One epoch of `loader` as a consumer actor gets it (Note [Loader host]): each batch a
/// message, its credit returned once taken.
inline std::vector<data::sample> actor_epoch(data::data_loader& loader, caf::actor_system& sys) {
  std::vector<data::sample> out;
  caf::scoped_actor self{sys};
  loader.run_epoch(self);
  for (bool done = false; !done;)
    self->receive(
        [&](actors::batch_atom, const actors::delivery& d) {
          REQUIRE(d.error.empty());
          done = d.end_of_epoch;
          if (done)
            return;
          out.push_back(d.data);
          self->send(caf::actor_cast<caf::actor>(self->current_sender()),
                     actors::credit_atom::value, d.run_id);
        },
        caf::after(std::chrono::seconds(30)) >> [&] { FAIL("no batch within 30 s"); });
  return out;
}

/// Epochs 1 and 2 of `loader`, epoch 0 run and dropped: what a run resumed in epoch 1 must
/// deliver.
struct later_epochs {
  std::vector<data::sample> first, second;
};
inline later_epochs epochs_after_the_first(data::data_loader& loader) {
  later_epochs out;
  for (const auto& b : loader)
    (void)b;
  for (const auto& b : loader)
    out.first.push_back(b);
  for (const auto& b : loader)
    out.second.push_back(b);
  return out;
}

} // namespace actorch::test
