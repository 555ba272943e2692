// What a dataset can ask about where it runs: get_worker_info() (torch.utils.data's) inside a
// loader worker, the batch's own generator, and the CPUs its thread may run on.
// Note [Batch randomness]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Randomness a dataset or collate_fn needs (augmentation) should come
// from batch_generator(), which the loader seeds before each sample from (base seed, epoch,
// batch index, position in the batch), so a run yields the same batches whatever num_workers
// is and whichever worker loads a batch or one of its samples (the epoch's first batches are
// loaded by all workers at once: Note [First batches shared]). A collate_fn draws from one of
// its own (position = the batch's size). Both are thread-local: the loader sets them around each
// sample, on the thread that loads it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/random.hpp"

namespace actorch::data {

/// What runs around a loader worker process's fork(), on the forking thread (see
/// loader_options::fork_hooks): `before`, then `parent` here or `child` in the new process.
struct fork_hooks {
  std::function<void()> before, parent, child;
};

/// How a loader worker process starts as a new program instead of a fork
/// (loader_options::multiprocessing_context "spawn"): `argv` runs with the worker's socket as
/// file descriptor 3 and its shared batch file as 4. Its first frame holds the worker's numbers
/// and `payload` (serve_spawned_worker in actors/loader/worker.hpp reads it; the Python module's
/// program unpickles the dataset from the payload); then it serves tasks as a forked child.
struct spawn_command {
  std::vector<std::string> argv;
  std::string payload;
};

struct worker_info {
  int64_t id = 0;
  int64_t num_workers = 0;
  uint64_t seed = 0;   // base_seed + id, as PyTorch
  dataset_ptr dataset; // the loader's map-style dataset (null with an iterable one)
  /// The loader's iterable dataset (null with a map-style one): its iter() runs in each worker,
  /// which by default yields the whole stream; split it on `id` and `num_workers`.
  iterable_dataset_ptr iterable_dataset;
};

/// The worker loading on this thread, or nullptr outside a loader worker (num_workers == 0
/// loads in the consumer's thread and gives nullptr, as PyTorch's main process does).
const worker_info* get_worker_info();

/// The generator of the batch being loaded on this thread; outside a loader, the default
/// generator. See Note [Batch randomness].
generator& batch_generator();

/// Draws from batch_generator(), one Philox block each (the transforms' random choices):
/// uniform in [0, n) (the modulo bias, n / 2^64, is far below anything observable), and
/// uniform in [0, 1) with 53 bits.
int64_t draw_index(int64_t n);
double draw_unit();

/// The seed of the sample at `position` of a batch whose seed is `batch_seed`: each sample
/// draws from its own generator, so it does not matter which worker loads it or what was
/// loaded before it (Note [Batch randomness]).
uint64_t sample_seed(uint64_t batch_seed, int64_t position);

/// The seed of batch `batch_index` of epoch `epoch` (a SplitMix64 mix of the three).
uint64_t batch_seed(uint64_t base_seed, int64_t epoch, int64_t batch_index);

/// The CPUs the calling thread may run on (its affinity mask), ascending: what
/// loader_options::worker_cpus may name.
std::vector<int> usable_cpus();

/// Restricts the calling thread to CPU `cpu` (what a loader worker with worker_cpus does before
/// worker_init_fn); throws actorch::error naming the CPU if the system refuses.
void pin_thread_to_cpu(int cpu);

/// Lets the calling thread run on `cpus` (usable_cpus()'s answer before a pin, to undo it).
void allow_thread_cpus(const std::vector<int>& cpus);

/// Sets the thread's worker info / batch generator for the scope's lifetime (loader internals).
class worker_scope {
public:
  explicit worker_scope(const worker_info* info);
  ~worker_scope();
  worker_scope(const worker_scope&) = delete;
  worker_scope& operator=(const worker_scope&) = delete;

private:
  const worker_info* previous_;
};

class batch_scope {
public:
  explicit batch_scope(uint64_t seed);
  ~batch_scope();
  batch_scope(const batch_scope&) = delete;
  batch_scope& operator=(const batch_scope&) = delete;

private:
  generator gen_;
  generator* previous_;
};

} // namespace actorch::data
