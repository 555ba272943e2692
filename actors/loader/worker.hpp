// The dataset worker: a detached actor implementing source_actor over a map-style dataset, or
// over its own iterator of an iterable dataset. For each index batch it calls dataset.get(i) for
// every index (or pulls batch_size samples from its iterator), on its own thread: a slow or
// blocking dataset never blocks CAF's scheduler; then it collates the samples into a batch
// buffer from the pool (pinned memory when pin_memory). Collate and pin-memory thus run in the
// worker, in parallel across workers, as PyTorch's workers collate (Note [Loader stages] in
// worker.cpp). A map-style worker with no task of its own left takes one queued at another
// worker (Note [Task stealing] in task_board.cpp). The inline source (num_workers = 0) loads
// with the same functions on the consumer's thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>

#include "actors/interfaces.hpp"
#include "actors/loader/batch_recipe.hpp"
#include "actors/loader/batch_sharing.hpp"
#include "actors/loader/batch_shelf.hpp"
#include "actors/loader/slow_samples.hpp"
#include "actors/loader/task_board.hpp"
#include "core/data/dataset.hpp"
#include "core/data/worker_info.hpp"

namespace actorch::actors {

struct worker_config {
  data::dataset_ptr dataset;           // map-style; or
  data::iterable_dataset_ptr iterable; // iterable-style: the worker iterates its own iter()
  int64_t id = 0;
  int64_t num_workers = 1;
  uint64_t base_seed = 0; // worker seed = base_seed + id, as PyTorch
  batch_recipe recipe;
  std::function<void(int64_t)> worker_init_fn;
  int cpu = -1; // pin the worker's thread to this CPU first (Note [Worker CPUs]); -1: don't
  /// Without `cpu`: after worker_init_fn the thread keeps to the start_cpu-th of the CPUs it
  /// may use for its first batch, then runs where the kernel puts it (Note [Worker CPUs]); -1:
  /// wherever the kernel puts it from the start.
  int start_cpu = -1;
  /// The run the loader currently wants; tasks of older runs are answered at once, unloaded.
  std::shared_ptr<std::atomic<uint64_t>> active_run_id;
  /// Offered each loaded batch before replying (Note [Batch shelf]); null: always reply.
  std::shared_ptr<batch_shelf> shelf;
  /// Where the worker claims its tasks and takes others' (Note [Task stealing]); null: neither.
  std::shared_ptr<task_board> board;
  /// The epoch's first batches, open to every worker (Note [First batches shared]); null:
  /// each batch is loaded by one worker.
  std::shared_ptr<batch_sharing> sharing;
  /// Load in a forked child process (multiprocessing_context = "fork"; Note [Worker processes]
  /// in worker_process.cpp), killed when a load passes `timeout_s` (> 0): the batch's error,
  /// or with retry_timeouts a death (the worker replaced, the batch loaded again).
  bool process = false;
  double timeout_s = 0;
  bool retry_timeouts = false;
  data::fork_hooks hooks;    // around the fork (loader_options::fork_hooks)
  data::spawn_command spawn; // non-empty argv: the child is a new program (loader_options::spawn)
  double report_delay_s = 0; // loader_options::report_delay
  /// Worker threads' samples past report_delay, named on stderr (slow_samples.hpp); null: none.
  std::shared_ptr<slow_samples> slow;
  int stack_signal = 0; // loader_options::worker_stack_signal
};

/// Loads one batch on the calling thread: get() each index, collate (default_convert the one
/// sample when !task.auto_collation), pin. Any exception from the dataset or collate becomes
/// `error` naming `who` ("DataLoader worker 2"), the sample index and batch, and the original
/// message.
/// With `sharing`, the epoch's first batches are loaded by every worker at once, and this
/// worker loads an earlier open batch's samples before its own (Note [First batches shared]).
loaded_batch load_batch(const index_batch& task, const data::dataset& ds,
                        const batch_recipe& recipe, const std::string& who,
                        const std::atomic<uint64_t>* active_run_id = nullptr,
                        batch_sharing* sharing = nullptr);

/// Pulls the next batch from `it` (made by ds.iter() first when null) on the calling thread:
/// recipe.batch_size samples (one when !task.auto_collation), fewer at the end of the stream, then
/// collates and pins as load_batch does. end_of_data when the stream yields nothing more (or
/// only a short batch and recipe.drop_last). First it pulls and drops the batches of
/// task.skip_seeds (a resumed run: Note [Iterable resume] in plan.cpp). An exception
/// from iter(), next() or collate becomes `error` naming `who` and the batch.
loaded_batch load_stream_batch(const index_batch& task, const data::iterable_dataset& ds,
                               std::unique_ptr<data::sample_iterator>& it,
                               const batch_recipe& recipe, const std::string& who);

/// A batch a user's source returned uncollated (a tuple of its samples) or unpinned, finished
/// as a worker finishes its own (Note [Loader stages]): collated (converted when
/// !auto_collation), then pinned when recipe.pin_memory. An exception becomes b.error, prefixed by
/// failure().
void finish_batch(loaded_batch& b, bool auto_collation, const batch_recipe& recipe,
                  const std::function<std::string()>& failure);

/// Spawns a detached dataset worker (map-style or iterable, after cfg). Its worker_init_fn runs
/// on its thread before its first batch, with get_worker_info() set; so does an iterable
/// worker's iter(), once per run (run_id).
source_actor spawn_dataset_worker(caf::actor_system& sys, worker_config cfg);

/// A spawned worker program's side (Note [Spawned workers] in worker_process.cpp): serves the
/// tasks on `sock` as worker `cfg` (its numbers from worker_process::parse_spawn_frame, its
/// dataset, collate and worker_init_fn rebuilt by the program), batches into `shm_fd`, as a
/// forked child does; `init_error` (not empty: the program could not rebuild the worker) is
/// every task's error instead. Exits the process when the worker closes the socket.
[[noreturn]] void serve_spawned_worker(int sock, int shm_fd, pid_t parent, worker_config cfg,
                                       std::string init_error);

} // namespace actorch::actors
