// The data-parallel digits job shared by examples/digits_ddp (processes started by the
// launcher) and examples/digits_actors (trainer actors in one process): options, the trainer
// spec (MLP 64-128-10 or, with --model cnn, a small CNN on the 8x8 images; SGD with momentum,
// per-sample Normalize in the dataset workers), a progress display, and the run's outputs
// (checkpoint, metrics.csv, curves.png).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/trainer.hpp"

namespace digits {

struct options {
  std::string data;               // the digits CSV (gzip)
  std::string out = "digits-run"; // checkpoint, metrics.csv and curves.png go here
  int64_t epochs = 30;
  int64_t batch_size = 32; // per replica
  int64_t num_workers = 1; // dataset worker actors per replica
  int actors = 1;          // trainer actors per process
  double lr = 0.05;
  std::string model = "mlp"; // "mlp" or "cnn" (cnn_layers())
  /// DDP's communication hook: "" (the built-in average), "allreduce", "fp16", "bf16" or
  /// "powersgd" (rank 1, compressed from the 10th step, error feedback and warm start).
  std::string comm_hook;
  std::string trace;            // Chrome trace of the run
  std::string resume;           // a checkpoint to continue from
  int64_t checkpoint_every = 0; // steps between checkpoints (0: at epoch ends only)
  int64_t max_steps = -1;       // stop after this many steps in all (-1: no limit)
  /// "cpu", or "cuda" / "cuda:N": the replicas train on GPUs (under a launcher, process p's
  /// replica on cuda:LOCAL_RANK, its gradients over NCCL).
  actorch::device device{};
  bool plot = true; // curves.png through gnuplot (--plot 0: machines without it)
  /// The sample log: each process appends two lines per step to PATH.RANK
  /// ("pid epoch membership step taken index,index,..." and "... done"), so that a test can
  /// count every sample of every epoch (trainer_spec::on_step_samples).
  std::string sample_log;
};

/// The --model cnn network, as torch.nn.Sequential would hold it: Conv2d(1, 16, 3, padding=1),
/// ReLU, Conv2d(16, 32, 3, padding=1), ReLU, MaxPool2d(2), Dropout2d(0.25), Flatten,
/// Linear(512, 128), ReLU, Dropout(0.5), Linear(128, 10) (the seeds' MNIST Net, sized for 8x8).
std::shared_ptr<actorch::nn::sequential> cnn_layers(actorch::generator* gen);

/// Parses argv (both examples take the same flags). Throws actorch::error naming a bad flag.
options parse(int argc, char** argv, const char* program);

/// The trainer spec of the job: the train split (80%, a fixed permutation) through the loader
/// with the per-sample transform, evaluation on the test split (whose indices into the digits
/// file go to `test_indices` when given).
actorch::actors::trainer_spec make_spec(const options& o,
                                        std::vector<int64_t>* test_indices = nullptr);

/// Runs the job's part in this process (`pg` null: one process) and, on the process holding
/// rank 0, prints progress and writes the outputs. Returns the final test accuracy (rank 0).
double run(const options& o, std::shared_ptr<actorch::dist::process_group> pg);

} // namespace digits
