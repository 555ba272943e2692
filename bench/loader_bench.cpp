// The `loader` and `loader-raw` workloads of ../shared/bench/WORKLOADS.md: N synthetic samples
// (float32 [3,32,32], element j of sample i = ((j + i) mod 251) / 251, then P passes of
// x = (x - 0.5) / 0.25; label i % 10), batch 64, shuffled with seed 0. `loader` runs them
// through the actor data loader with W workers; `loader-raw` does the same run_id, passes
// and batching in one plain loop (the efficiency reference). `loader-raw --threads T` shares
// that loop's batches among T threads (each takes the next one not taken) that share nothing
// else but the permutation and the buffer pool: what T cores of this machine give for the same
// work without a pipeline (on a VM, two vCPUs rarely give twice one; see
// bench/loader_efficiency.py); `--pin-threads 1` pins thread t to the t-th usable CPU, as
// `loader --pin-workers 1` pins the workers. Run both as the peer runs, with
// OPENBLAS_NUM_THREADS=1: otherwise OpenBLAS's idle pool thread spins on sched_yield for the
// first ~0.1 s of the process (strace: ~1000 yields in one run), which is the whole of this
// 50 ms workload, and competes with the two workers for the two cores.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <thread>

#include "actors/data_loader.hpp"
#include "bench/bench.hpp"
#include "core/data/collate.hpp"
#include "core/data/npy_dataset.hpp"
#include "core/data/transforms.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"
#include "core/trace.hpp"

namespace actorch::bench {

namespace {

class synthetic_dataset : public data::dataset {
public:
  synthetic_dataset(int64_t n, int64_t passes) : n_(n), passes_(passes) {}
  int64_t size() const override { return n_; }
  data::sample get(int64_t i) const override {
    tensor x = empty({3, 32, 32});
    float* p = x.data_ptr<float>();
    // ((j + i) mod 251) / 251, computed per element, one run of consecutive residues at a
    // time so that the division vectorises.
    int j = 0;
    int r = int(i % 251);
    while (j < 3072) {
      const int run = std::min(251 - r, 3072 - j);
      for (int t = 0; t < run; ++t)
        p[j + t] = float(r + t) / 251.0f;
      j += run;
      r = 0;
    }
    for (int64_t k = 0; k < passes_; ++k)
      for (int e = 0; e < 3072; ++e)
        p[e] = (p[e] - 0.5f) / 0.25f;
    return data::sample::make_tuple({x, i % 10});
  }

private:
  int64_t n_, passes_;
};

using clock_type = std::chrono::steady_clock;

constexpr int64_t kBatch = 64; // the workload's batch size

void print(std::ostream& out, const std::string& head, int64_t samples, double seconds) {
  out << head << " samples=" << samples << " time_s=" << std::fixed << std::setprecision(3)
      << seconds << " samples_per_s=" << std::setprecision(0) << double(samples) / seconds
      << std::defaultfloat << std::endl;
}

/// One epoch of `ds` through the actor data loader, timed from the range-for's start to its end
/// (the loader and its actor system are made before); prints `label ... samples_per_s=R`.
void time_loader(const data::dataset_ptr& ds, const loader_bench_options& o,
                 const std::string& label, std::ostream& out) {
  if (!o.trace.empty())
    trace::enable();
  const std::vector<int> cpus = o.pin_workers ? data::usable_cpus() : std::vector<int>{};
  data::data_loader loader(ds, {.batch_size = kBatch,
                                .shuffle = true,
                                .num_workers = o.workers,
                                .multiprocessing_context = o.multiprocessing_context,
                                .generator = std::make_shared<generator>(0),
                                .worker_cpus = cpus});
  const auto t0 = clock_type::now();
  int64_t seen = 0;
  double chk = 0;
  for (const data::sample& batch : loader) { // the consumer touches every batch
    const tensor& x = batch[0].as_tensor();
    seen += x.size(0);
    chk += double(x.data_ptr<float>()[0]);
  }
  const auto t1 = clock_type::now();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  ACTORCH_CHECK(seen == o.n && chk == chk, "bench ", label, ": saw ", seen, " samples of ", o.n);
  std::string pinned;
  for (int cpu : cpus)
    pinned += (pinned.empty() ? " worker_cpus=" : ",") + std::to_string(cpu);
  print(out,
        label + " workers=" + std::to_string(o.workers) + pinned +
            (o.multiprocessing_context.empty() ? "" : " context=" + o.multiprocessing_context) +
            " passes=" + std::to_string(o.passes) + " n=" + std::to_string(o.n),
        seen, dt);
  if (!o.trace.empty()) { // after the figure, which a failed write must not lose
    trace::record("consumer", "epoch", t0, t1);
    trace::write_chrome_json(o.trace, 0, "actorch bench " + label);
    trace::enable(false);
  }
}

} // namespace

void run_loader(const loader_bench_options& o, std::ostream& out) {
  if (!o.npy.empty()) { // the same files bench/python_loader.py loads from Python
    auto ds = std::make_shared<data::npy_dataset>(o.npy);
    loader_bench_options files = o;
    files.n = ds->size();
    time_loader(ds, files, "loader-npy", out);
    return;
  }
  time_loader(std::make_shared<synthetic_dataset>(o.n, o.passes), o, "loader", out);
}

void run_loader_raw(const loader_bench_options& o, std::ostream& out) {
  ACTORCH_CHECK(o.threads >= 1, "bench loader-raw: --threads must be at least 1, got ", o.threads);
  synthetic_dataset ds(o.n, o.passes);
  auto pool = data::buffer_pool::make(cpu_allocator());
  generator gen(0);
  const int64_t nbatches = (o.n + kBatch - 1) / kBatch;
  std::vector<int64_t> seen(size_t(o.threads), 0);
  std::vector<double> chk(size_t(o.threads), 0);
  const auto t0 = clock_type::now();
  const auto order = data::random_permutation(o.n, gen);
  // Each thread takes the next batch not taken (one atomic counter, so that a slower core takes
  // fewer), and nothing else passes between the threads; threads = 1 is the plain loop.
  std::atomic<int64_t> next{0};
  const std::vector<int> cpus = o.pin_workers ? data::usable_cpus() : std::vector<int>{};
  auto run = [&](int64_t t) {
    if (!cpus.empty()) // as the loader pins its workers (Note [Worker CPUs])
      data::pin_thread_to_cpu(cpus[size_t(t) % cpus.size()]);
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < nbatches;) {
      // Batched as the loader's workers batch with the default collate_fn.
      const int64_t first = b * kBatch, end = std::min(o.n, first + kBatch);
      data::collator into(end - first, pool.get());
      for (int64_t k = first; k < end; ++k)
        into.add(ds.get(order[size_t(k)]));
      data::sample batch = into.finish();
      const tensor& x = batch[0].as_tensor();
      seen[size_t(t)] += x.size(0);
      chk[size_t(t)] += double(x.data_ptr<float>()[0]);
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < o.threads; ++t)
    helpers.emplace_back(run, t);
  run(0);
  for (auto& h : helpers)
    h.join();
  const double dt = std::chrono::duration<double>(clock_type::now() - t0).count();
  const int64_t total = std::accumulate(seen.begin(), seen.end(), int64_t(0));
  const double sum = std::accumulate(chk.begin(), chk.end(), 0.0);
  ACTORCH_CHECK(total == o.n && sum == sum, "bench loader-raw: saw ", total, " samples of ", o.n);
  std::string pinned;
  for (int64_t t = 0; t < o.threads && !cpus.empty(); ++t)
    pinned += (t == 0 ? " cpus=" : ",") + std::to_string(cpus[size_t(t) % cpus.size()]);
  print(out,
        std::string("loader-raw") +
            (o.threads > 1 ? " threads=" + std::to_string(o.threads) : std::string()) + pinned +
            " passes=" + std::to_string(o.passes) + " n=" + std::to_string(o.n),
        total, dt);
}

// The `loader` workload with per-sample augmentation, as a CIFAR-10 training pipeline applies it
// (torchvision's Normalize + RandomCrop(32, padding=4) + RandomHorizontalFlip) in the dataset
// workers, after the P passes. bench/peer_loader_transforms.py is the same through PyTorch.
void run_loader_transforms(const loader_bench_options& o, std::ostream& out) {
  namespace tf = data::transforms;
  auto ds = std::make_shared<tf::transformed_dataset>(
      std::make_shared<synthetic_dataset>(o.n, o.passes),
      tf::compose({tf::normalize({0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}),
                   tf::random_crop(32, {.padding = {4}}), tf::random_horizontal_flip()}));
  time_loader(ds, o, "loader-transforms", out);
}

} // namespace actorch::bench
