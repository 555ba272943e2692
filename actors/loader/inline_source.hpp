// The inline source: num_workers = 0. The consumer's thread loads each batch itself when it
// asks for it, with the workers' own functions (worker.hpp), as PyTorch's main process does; no
// actor is involved. get_worker_info() is null here.
#pragma once

#include <memory>

#include "actors/loader/batch_recipe.hpp"
#include "actors/loader/feed.hpp"
#include "core/data/dataset.hpp"

namespace actorch::actors {

struct inline_source_config {
  data::dataset_ptr dataset;           // map-style; or
  data::iterable_dataset_ptr iterable; // iterable: this thread iterates iter()
  bool auto_collation = true;
  batch_recipe recipe;
};

class inline_source final : public batch_feed {
public:
  explicit inline_source(inline_source_config cfg) : cfg_(std::move(cfg)) {}

  void start(epoch_plan plan) override;
  /// Loads the run's next batch on the calling thread.
  delivery next() override;
  void finish() override { it_.reset(); }

private:
  inline_source_config cfg_;
  epoch_plan plan_;
  size_t pos_ = 0; // map-style: position in plan.batches; iterable: the next batch's seq
  std::unique_ptr<data::sample_iterator> it_; // iterable: this run's pass
  bool ended_ = false;
};

} // namespace actorch::actors
