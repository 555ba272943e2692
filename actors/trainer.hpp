// Data-parallel training on actors: one trainer actor per replica (on the CPU or a GPU), each with
// its model replica wrapped in distributed_data_parallel, its optimizer and its loader shard (a
// DistributedSampler over the dataset), and one comm actor per process for the cross-process
// exchange (docs/architecture.md, "One gradient").
//
//   trainer_spec spec{.make_model = ..., .make_optimizer = ..., .forward = ..., .dataset = d};
//   job_report r = train_data_parallel(spec, {.num_local = 2});        // 2 actors, 1 process
//   job_report r = train_data_parallel(spec, {.process_group = world}); // 1 actor per process
//
// The same spec runs N actors in one process, one actor in each of N processes, or both: the
// replicas are numbered process rank x num_local + local index.
// This header includes no CAF.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/data_loader.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/ddp/sync_batch_norm.hpp"
#include "core/optim/optimizer.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

/// Where a replica sits in the job.
struct replica_info {
  int rank = 0;       // global replica rank
  int world_size = 1; // replicas in the job
  int local_rank = 0; // trainer actor index in this process
  int num_local = 1;
  int process_rank = 0;
  int num_processes = 1;
};

/// What the spec's forward returns for one batch.
struct step_result {
  tensor loss;          // the batch's mean loss; the trainer runs backward on it
  int64_t samples = 0;  // samples in the batch
  int64_t correct = -1; // correctly classified samples, or -1 when not counted
};

/// One training step of one replica (the numbers of its own batch).
struct train_progress {
  int rank = 0;
  int64_t epoch = 0;
  int64_t step = 0; // within the epoch, counted from 0
  int64_t steps_per_epoch = 0;
  double loss = 0;
  int64_t samples = 0;
  int64_t correct = -1;
  trace::clock::time_point time;
};

/// End of an epoch, with numbers reduced over every replica of the job.
struct epoch_summary {
  int64_t epoch = 0;
  double loss = 0;      // mean over the epoch's samples
  double accuracy = -1; // over the epoch's samples; -1 when not counted
  int64_t samples = 0;  // over every replica
  double seconds = 0;
  std::map<std::string, double> eval; // the spec's evaluate(), computed on rank 0
  /// The process that reported it, by its rank then (an elastic job's ranks change).
  int process_rank = 0;
};

/// A step as trainer_spec::on_step_samples sees it: the step is the `step`-th of this epoch
/// since membership `membership` (an elastic job's; else 0) began it, or since the job resumed
/// it (the same on every member).
struct step_samples {
  int64_t epoch = 0;
  int64_t membership = 0;
  int64_t step = 0;
  bool done = false;
  std::vector<int64_t> indices; // taken: the batch's dataset indices; done: empty
};

struct trainer_spec {
  /// This replica's model. Every replica builds the same shapes; rank 0's values win (DDP's
  /// construction broadcast).
  std::function<std::shared_ptr<nn::module>(const replica_info&)> make_model;
  /// The optimizer over the model's parameters.
  std::function<std::unique_ptr<optim::optimizer>(nn::module&)> make_optimizer;
  /// Forward and loss of one batch through the DDP-wrapped model; the trainer then runs
  /// backward (which returns with averaged gradients) and the optimizer step.
  std::function<step_result(dist::distributed_data_parallel&, const data::sample& batch)> forward;

  /// Training data. Each replica loads its shard through its own data_loader: `loader`'s
  /// options per replica (batch_size is per replica), with a DistributedSampler(world size,
  /// rank, shuffle = loader.shuffle, seed = seed, drop_last = loader.drop_last) as sampler.
  data::dataset_ptr dataset;
  data::loader_options loader;
  /// Instead of a dataset: the batch of step `step` (benchmarks on fixed inputs).
  std::function<data::sample(const replica_info&, int64_t step)> batch_fn;
  int64_t steps_per_epoch = 0; // with batch_fn

  int64_t epochs = 1;
  /// Stop after this many steps in total (a test's "kill mid-training", or a short run); -1: no
  /// limit.
  int64_t max_steps = -1;
  uint64_t seed = 0;
  /// DDP's options; unlike torch's default, the trainer's gradients are views into the
  /// buckets (gradient_as_bucket_view): the trainer owns the step, and nothing in it detaches
  /// or replaces a gradient, so the copy of every gradient out of its bucket is saved.
  dist::ddp_options ddp{.gradient_as_bucket_view = true};
  /// A communication hook for each replica's DDP (torch's register_comm_hook; built-in ones in
  /// comm/ddp/comm_hooks.hpp), made once per replica so that a hook's state (PowerSGD's) is the
  /// replica's own. Empty: DDP's built-in average.
  std::function<dist::comm_hook()> comm_hook;
  /// Converts every BatchNorm of each replica's model to SyncBatchNorm over the job's replicas
  /// (dist::convert_sync_batchnorm) before DDP wraps it.
  bool sync_batchnorm = false;
  /// The optimizer step sharded over the trainer actors of a job of one process, or over
  /// processes of one actor each on one host (Note [Sharded step] and Note [Sharded step across
  /// processes], after ZeroRedundancyOptimizer): the actors share one copy of the parameters
  /// (across processes, in memory they all map), and each averages the gradients of an equal
  /// share of their elements and steps it with the optimizer make_optimizer builds over a
  /// module holding that share (pieces of parameters, as 1-D views). The same results, bit for
  /// bit, with less work per step, for elementwise optimizers (SGD, Adam; one that takes a
  /// norm per parameter would see pieces). Unset: on wherever it applies (several actors in one
  /// process, or one actor in each of several processes whose Gloo group has shared memory;
  /// the CPU, no comm_hook, not elastic, contiguous float32/float64 parameters, of one dtype
  /// across processes, an optimizer over the module's parameters); true: an error where it does
  /// not apply; false: off (DDP's all-reduce, the whole step on every actor).
  std::optional<bool> zero_redundancy;

  /// Called on each replica's thread twice a step: when it takes its batch (`done` false,
  /// with the batch's dataset indices) and when the step's gradients are reduced (`done`
  /// true). A test counts a job's samples with it: in an elastic job a batch taken counts once a
  /// surviving rank finished that step (Note [Elastic healing]). The indices are what the
  /// trainer's share of the epoch (Note [Elastic data position]).
  std::function<void(const replica_info&, const step_samples&)> on_step_samples;

  /// Evaluation after each epoch, on rank 0's model (e.g. test accuracy), reported in the
  /// epoch's summary.
  std::function<std::map<std::string, double>(nn::module&)> evaluate;

  /// Rank 0 saves here (atomic safetensors: model, optimizer, epoch, step, loader position)
  /// after each epoch and every `checkpoint_every` steps (0: only at epoch ends); then a barrier.
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  /// Where each replica trains: the CPU, or a GPU. Replica `local_rank` of a process then uses
  /// cuda:((device.index + local_rank) mod the GPU count), so that actors share GPUs when there
  /// are more actors than GPUs: its model moves there and the loader prefetches its batches
  /// there (loader_options::device, pinned). The trainer actors of a process reduce their
  /// gradients among themselves on their GPUs and cross processes through the comm actor, as
  /// on the CPU; the job's process group must then be an nccl one on replica 0's GPU.
  actorch::device device{};
  /// Every replica loads this checkpoint before training and continues where it stopped,
  /// loader position included. A job that a launcher restarted (TORCHELASTIC_RESTART_COUNT
  /// above 0: actorch launch or torchrun --max-restarts) resumes from `checkpoint` when this is
  /// empty and the file exists, with no flag from the user (PyTorch leaves that to the script).
  std::string resume;
};

struct job_options {
  /// Trainer actors in this process.
  int num_local = 1;
  /// The group across processes; null when this process is the whole job.
  std::shared_ptr<dist::process_group> process_group{};
  /// Called on the calling thread for every step of every local replica, and at each epoch's
  /// end with the job-wide summary.
  std::function<void(const train_progress&)> on_progress{};
  std::function<void(const epoch_summary&)> on_epoch{};
  /// Writes a Chrome / Perfetto trace of the run here (every process's part merged by process
  /// 0): each batch through the loader's stages and the trainer, each bucket from ready to
  /// reduced, each cross-process all_reduce. Empty: no trace.
  std::string trace{};
};

struct job_report {
  std::vector<epoch_summary> epochs;
  /// This process's rank and the job's process count at the end (an elastic job's change when
  /// it loses a rank).
  int process_rank = 0;
  int num_processes = 1;
  /// When each step of local replica 0 ended (benchmarks derive step times from it).
  std::vector<trace::clock::time_point> step_end_times;
  /// Whether this process's replicas sharded the optimizer step (trainer_spec::zero_redundancy).
  bool zero_redundancy = false;
};

/// Runs the job's part in this process: a comm actor and num_local trainer actors (spawned in
/// an actor system of its own), until every replica has finished. Blocks. When a replica
/// fails, the others of this process are aborted (their pending exchanges fail) and this throws
/// actorch::error naming the replica and carrying its message; other processes see their
/// collectives fail and stop too (the launcher stops the whole job).
///
/// Under `actorch launch --elastic` (one CPU replica per process, a dataset), a rank the
/// launcher lost does not end the job: the others regroup without it, take the furthest
/// survivor's model and optimizer state, and divide the epoch's remaining samples among
/// themselves (Note [Elastic healing]).
job_report train_data_parallel(const trainer_spec& spec, const job_options& opts = {});

} // namespace actorch::actors
