// The inline source (inline_source.hpp).
#include "actors/loader/inline_source.hpp"

#include "actors/loader/plan.hpp"
#include "actors/loader/worker.hpp"

namespace actorch::actors {

namespace {
constexpr const char* kWho = "DataLoader (num_workers=0)";
} // namespace

void inline_source::start(epoch_plan plan) {
  plan_ = std::move(plan);
  // Iterable, resumed mid-epoch: the one stream's batches delivered before are passed over
  // (Note [Iterable resume] in plan.cpp).
  pos_ = plan_.iterable && !plan_.resumed.empty() ? size_t(plan_.resumed[0]) : 0;
  it_.reset();
  ended_ = false;
}

delivery inline_source::next() {
  delivery d;
  d.run_id = plan_.run_id;
  const bool more = plan_.iterable ? !ended_ : pos_ < plan_.batches.size();
  if (!more) {
    d.end_of_epoch = true;
    return d;
  }
  loaded_batch b;
  if (plan_.iterable) {
    const int64_t seq = int64_t(pos_++);
    std::vector<uint64_t> skip_seeds;
    if (!plan_.resumed.empty() && seq == plan_.resumed[0])
      skip_seeds = resume_skip_seeds(plan_.base_seed, plan_.epoch, seq, 1, 0);
    const index_batch task = make_task(plan_, seq, {}, cfg_.auto_collation, std::move(skip_seeds));
    b = load_stream_batch(task, *cfg_.iterable, it_, cfg_.recipe, kWho);
    ended_ = b.end_of_data || !b.error.empty();
    if (b.end_of_data && b.error.empty()) {
      d.end_of_epoch = true;
      return d;
    }
  } else {
    const auto& [seq, indices] = plan_.batches[pos_++];
    const index_batch task = make_task(plan_, seq, indices, cfg_.auto_collation);
    b = load_batch(task, *cfg_.dataset, cfg_.recipe, kWho);
  }
  d.seq = b.seq;
  d.data = std::move(b.data);
  d.error = std::move(b.error);
  d.recoverable = !d.error.empty() && !cfg_.iterable; // an iterator that raised is done
  return d;
}

} // namespace actorch::actors
