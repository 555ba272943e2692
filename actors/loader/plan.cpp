// The plan of a run (plan.hpp).
#include "actors/loader/plan.hpp"

#include <algorithm>
#include <sstream>

#include "base/error.hpp"
#include "core/data/worker_info.hpp"

namespace actorch::actors {

index_batch make_task(const epoch_plan& plan, int64_t seq, std::vector<int64_t> indices,
                      bool auto_collation, std::vector<uint64_t> skip_seeds) {
  index_batch task;
  task.run_id = plan.run_id;
  task.epoch = plan.epoch;
  task.seq = seq;
  task.indices = std::move(indices);
  task.seed = data::batch_seed(plan.base_seed, plan.epoch, seq); // Note [Batch randomness]
  task.auto_collation = auto_collation;
  task.skip_seeds = std::move(skip_seeds);
  return task;
}

std::vector<std::pair<int64_t, std::vector<int64_t>>>
plan_batches(data::batch_sampler& batches, int64_t epoch, const std::vector<int64_t>& delivered,
             int64_t dataset_size) {
  auto all = batches.batches();
  std::vector<bool> skip(all.size(), false);
  for (int64_t s : delivered) {
    ACTORCH_CHECK(s >= 0 && size_t(s) < all.size(), "DataLoader: the state it resumes from ",
                  "lists batch ", s, " as delivered, but epoch ", epoch, " has ", all.size(),
                  " batches (a state of a loader with another dataset, batch_size or sampler?)");
    skip[size_t(s)] = true;
  }
  std::vector<std::pair<int64_t, std::vector<int64_t>>> plan;
  for (size_t s = 0; s < all.size(); ++s) {
    for (int64_t i : all[s])
      ACTORCH_CHECK(i >= 0 && i < dataset_size, "DataLoader: the sampler yielded index ", i,
                    " for batch ", s, ", out of range for a dataset of ", dataset_size, " samples");
    if (!skip[s])
      plan.emplace_back(int64_t(s), std::move(all[s]));
  }
  return plan;
}

std::vector<int64_t> resumed_per_stream(const std::vector<int64_t>& delivered, int64_t streams) {
  std::vector<int64_t> count(size_t(streams), 0), last(size_t(streams), -1);
  for (int64_t s : delivered) {
    ACTORCH_CHECK(s >= 0, "DataLoader with IterableDataset: cannot resume from delivered batch ", s,
                  ": batch indices are not negative");
    ++count[size_t(s % streams)];
    last[size_t(s % streams)] = std::max(last[size_t(s % streams)], s / streams);
  }
  for (int64_t w = 0; w < streams; ++w)
    ACTORCH_CHECK(last[size_t(w)] + 1 == count[size_t(w)],
                  "DataLoader with IterableDataset: cannot resume: the delivered batches of "
                  "stream ",
                  w, " are not its first ", count[size_t(w)], " (a repeated or missing index k * ",
                  streams, " + ", w, "), so where that stream stood is unknown");
  return count;
}

// Note [Iterable resume]
// ~~~~~~~~~~~~~~~~~~~~~~
// A stream cannot be rewound, so a run resumed mid-epoch passes over what was delivered
// before: delivered batches are, per worker, the first few of its stream (a worker answers its
// tasks in order, and in_order delivers in index order), so the state's delivered indices say
// how many batches of each stream to skip (resumed_per_stream). The first task of a worker's
// run carries their seeds; the worker pulls those batches' samples under them and drops them
// (no collate), then loads its own (load_stream_batch in worker.cpp). The skipped batches
// still cost their loading (as torchdata's StatefulDataLoader's fast-forward does for a dataset
// without a state of its own), so that task's deadline is the timeout times the batches it
// covers (Note [Loader timeout] in supervisor.cpp).
std::vector<uint64_t> resume_skip_seeds(uint64_t base_seed, int64_t epoch, int64_t k,
                                        int64_t streams, int64_t w) {
  std::vector<uint64_t> out;
  for (int64_t j = 0; j < k; ++j)
    out.push_back(data::batch_seed(base_seed, epoch, j * streams + w));
  return out;
}

std::string indices_str(const std::vector<int64_t>& idx) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < idx.size() && i < 16; ++i)
    os << (i ? ", " : "") << idx[i];
  if (idx.size() > 16)
    os << ", ...";
  os << ']';
  return os.str();
}

} // namespace actorch::actors
