// Benchmarks behind `actorch bench NAME`. Each prints one `name key=value ...` line per
// measurement (the format of ../shared/bench/WORKLOADS.md) to the given stream.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace actorch::bench {

struct tensor_options {
  int64_t gemm_size = 1024;       // M = N = K
  int64_t add_bytes = 64ll << 20; // bytes of each operand of add and of memcpy
  double min_seconds = 0.5;       // time each measurement at least this long
};

/// float32 GEMM GFLOP/s, elementwise add GB/s and the machine's memcpy GB/s, side by side.
void run_tensor(const tensor_options& opts, std::ostream& out);

/// Runs `rank` as this process's rank when `actorch launch` started it (RANK in the
/// environment), else forks `world` ranks on 127.0.0.1 that each run it (comm/launch's spawn).
void run_as_ranks(int world, const std::function<void()>& rank);

struct allreduce_options {
  int world = 2; // ranks forked when not started by `actorch launch`
  std::string backend = "gloo";
  std::vector<int64_t> sizes = {4 << 10, 256 << 10, 4 << 20, 64 << 20}; // bytes
};

/// float32 SUM all_reduce time and bandwidth per size (WORKLOADS.md `allreduce`), from rank 0.
void run_allreduce(const allreduce_options& opts, std::ostream& out);

struct collectives_options {
  int world = 2; // ranks forked when not started by `actorch launch`
  std::string backend = "gloo";
  /// all_reduce all_gather reduce_scatter broadcast reduce all_to_all send_recv (the default:
  /// all of them).
  std::vector<std::string> ops;
  int64_t max_bytes = int64_t(64) << 20;
};

/// WORKLOADS.md's `coll` workload, nccl-tests style: every collective at 8 B to 32 MiB in x4
/// steps and 64 MiB, median and slowest of the timed iterations, algbw and busbw, every result
/// checked once. One `coll` line per op and size from rank 0; a wrong result on any rank fails
/// the run (an error naming the op and size) after its line says check=FAIL.
void run_collectives(const collectives_options& opts, std::ostream& out);

struct ddp_mlp_options {
  std::string mode = "single"; // single (world 1), independent, actors, process or dp
  int64_t world = 1;
  int64_t batch = 64;
  int64_t warmup = 5;
  int64_t steps = 50;
  std::string trace{};   // actors and process modes: a Chrome trace of the run
  int64_t hidden = 1024; // width of the hidden layers
  int64_t depth = 1;     // hidden-to-hidden Linear layers
  // actors and process modes: DDP's bucket_cap_mb and adaptive_buckets.
  double bucket_cap_mb = 25;
  bool adaptive_buckets = true;
  // actors mode: trainer_spec::zero_redundancy (the sharded step, where it applies).
  bool zero_redundancy = true;
  /// "cpu", or a GPU: mode single is then WORKLOADS.md's gpu-step; the actors and process
  /// modes put one GPU replica in each process (trainer_spec::device).
  std::string device = "cpu";
};

struct h2d_options {
  std::string device = "cuda:0";
  double min_seconds = 0.5; // per measurement
};

/// WORKLOADS.md's h2d: host-to-device GB/s for one loader batch (64x3x32x32 float32) and for
/// 64 MiB, through tensor::copy_ from pinned (non_blocking) and from pageable memory, and a
/// plain cudaMemcpyAsync loop from pinned memory (the ceiling the pinned copy is held to).
void run_h2d(const h2d_options& opts, std::ostream& out);

/// The ddp-mlp workload: Linear(784,H) ReLU [Linear(H,H) ReLU] x depth Linear(H,10), H = 1024
/// and depth 1 by default, cross-entropy, SGD(lr 0.01, momentum 0.9) on fixed random inputs;
/// ms per step. The line names hidden, depth and the bucket options when they differ from
/// the defaults.
void run_ddp_mlp(const ddp_mlp_options& opts, std::ostream& out);

struct loader_bench_options {
  int64_t workers = 2; // dataset worker actors (0: load in the consumer's thread)
  int64_t passes = 1;  // normalisation passes per sample
  int64_t n = 20000;   // samples
  int64_t threads = 1; // `loader-raw`: threads sharing the plain loop's batches
  /// `loader`: worker_cpus = usable_cpus() (Note [Worker CPUs]); `loader-raw`: thread t
  /// pinned to the t-th usable CPU likewise.
  bool pin_workers = false;
  std::string trace; // `loader`: write a Chrome trace of the epoch here (empty: none)
  /// `loader`: the loader's multiprocessing_context ("fork": worker processes; prints
  /// context=fork).
  std::string multiprocessing_context;
  /// `loader`: load these .npy files (npy_dataset) instead of the synthetic samples; prints
  /// loader-npy, n being the files' length.
  std::vector<std::string> npy;
};

/// The `loader` workload: the actor data loader over the synthetic dataset, samples per second.
void run_loader(const loader_bench_options& opts, std::ostream& out);
/// `loader-raw`: the same work in one plain single-threaded loop (the efficiency reference);
/// with threads > 1, that many threads take its batches in turn from one counter, no pipeline.
void run_loader_raw(const loader_bench_options& opts, std::ostream& out);
/// `loader-transforms`: `loader` plus Normalize, RandomCrop(32, padding 4) and
/// RandomHorizontalFlip per sample in the workers (`actorch bench loader --transforms 1`).
void run_loader_transforms(const loader_bench_options& opts, std::ostream& out);

struct images_options {
  std::string root;    // an ImageFolder tree (bench/make_images.py writes one)
  int64_t workers = 2; // dataset worker actors (0: load in the consumer's thread)
  bool fuse = true;    // decode only the crop, at a reduced scale (Note [Fused image path])
  double step_ms = 0;  // > 0: a third pass with a consumer of this step time (starvation)
  std::string multiprocessing_context{}; // "fork": worker processes
  std::string trace{};                   // write a Chrome trace of the two passes here
};

/// The `images` workload: images per second, first batch, CPU seconds per image and peak RSS
/// of the ImageFolder JPEG pipeline, as ../shared/bench/peer/torch_images.py measures them.
void run_images(const images_options& opts, std::ostream& out);

struct report_options {
  int rounds = 3;
  std::string out_dir = "bench-report";
  /// The PyTorch peer scripts (torch_loader.py, torch_allreduce.py, torch_ddp_mlp.py, and
  /// peer_tensor.py if it has one, else bench/peer_tensor.py); empty: $ACTORCH_PEER_DIR, else
  /// ../shared/bench/peer. Missing: the report has no peer columns.
  std::string peer_dir;
  std::string python = "/usr/bin/python3";
  bool quick = false; // small sizes and few steps (the test suite's run)
};

/// `actorch bench report`: every standard workload and its peer, alternately, for `rounds`
/// rounds; writes report.md (medians and ratios), report.png (gnuplot) and raw.txt into
/// out_dir. Progress goes to `log`.
void run_report(const report_options& opts, std::ostream& log);

} // namespace actorch::bench
