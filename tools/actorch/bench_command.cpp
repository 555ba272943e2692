// `actorch bench tensor` (and the other workloads as their layers land).
#include <iostream>

#include "bench/bench.hpp"
#include "core/device.hpp"
#include "tools/actorch/commands.hpp"

namespace actorch::cli {

void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "run a benchmark workload (bench/)");
  bench->require_subcommand(1);

  auto opts = std::make_shared<bench::tensor_options>();
  auto* tensor_cmd = bench->add_subcommand("tensor", "GEMM GFLOP/s, add and memcpy GB/s");
  tensor_cmd->add_option("--size", opts->gemm_size, "GEMM M = N = K")->check(CLI::Range(1, 16384));
  tensor_cmd->add_option("--bytes", opts->add_bytes, "bytes of each add operand")
      ->check(CLI::Range(int64_t(4), int64_t(1) << 34));
  tensor_cmd->add_option("--min-seconds", opts->min_seconds, "time per measurement")
      ->check(CLI::Range(0.0, 60.0));
  tensor_cmd->callback([opts] { bench::run_tensor(*opts, std::cout); });

  auto ar = std::make_shared<bench::allreduce_options>();
  auto* ar_cmd = bench->add_subcommand("allreduce", "float32 SUM all_reduce over ranks on "
                                                    "127.0.0.1 (forks them unless launched)");
  ar_cmd->add_option("--world", ar->world, "ranks to fork")->check(CLI::Range(1, 64));
  ar_cmd->add_option("--backend", ar->backend, "gloo");
  ar_cmd->add_option("--bytes", ar->sizes, "sizes to measure");
  ar_cmd->callback([ar] { bench::run_allreduce(*ar, std::cout); });

  auto co = std::make_shared<bench::collectives_options>();
  auto* co_cmd = bench->add_subcommand(
      "collectives", "every collective, nccl-tests style (WORKLOADS.md coll), over ranks on "
                     "127.0.0.1 (forks them unless launched)");
  co_cmd->add_option("--world", co->world, "ranks to fork")->check(CLI::Range(2, 64));
  co_cmd->add_option("--backend", co->backend, "gloo");
  co_cmd->add_option("--ops", co->ops, "collectives to measure (default: all)")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                             "all_to_all", "send_recv"}));
  co_cmd->add_option("--max-bytes", co->max_bytes, "the largest size (default 64 MiB)")
      ->check(CLI::Range(int64_t(8), int64_t(1) << 34));
  co_cmd->callback([co] { bench::run_collectives(*co, std::cout); });

  auto mlp = std::make_shared<bench::ddp_mlp_options>();
  auto* mlp_cmd = bench->add_subcommand("ddp-mlp", "training step time of the ddp-mlp model");
  mlp_cmd
      ->add_option("--mode", mlp->mode,
                   "single (one replica, world 1), actors (trainer actors in one process), "
                   "process (one trainer actor in each of --world processes), dp (one model "
                   "in nn::data_parallel with --world replicas, fed their batches as one) or "
                   "independent (--world processes each running single at once, no "
                   "communication: the machine's floor)")
      ->check(CLI::IsMember({"single", "independent", "actors", "process", "dp"}));
  mlp_cmd->add_option("--world", mlp->world, "replicas")->check(CLI::Range(1, 64));
  mlp_cmd->add_option("--batch", mlp->batch, "batch per replica")->check(CLI::Range(1, 65536));
  mlp_cmd->add_option("--warmup", mlp->warmup, "untimed steps")->check(CLI::Range(0, 1000));
  mlp_cmd->add_option("--steps", mlp->steps, "timed steps")->check(CLI::Range(1, 100000));
  mlp_cmd->add_option("--trace", mlp->trace,
                      "write a Chrome trace of the run (data-parallel modes)");
  mlp_cmd->add_option("--hidden", mlp->hidden, "width of the hidden layers")
      ->check(CLI::Range(1, 16384));
  mlp_cmd->add_option("--depth", mlp->depth, "hidden-to-hidden layers")->check(CLI::Range(0, 64));
  mlp_cmd->add_option("--bucket-cap-mb", mlp->bucket_cap_mb, "DDP's bucket_cap_mb")
      ->check(CLI::Range(0.001, 4096.0));
  mlp_cmd
      ->add_option("--adaptive-buckets", mlp->adaptive_buckets,
                   "1: buckets chosen from measured timings after a few steps (DDP's "
                   "adaptive_buckets); 0: torch's static buckets")
      ->check(CLI::Range(0, 1));
  mlp_cmd
      ->add_option(
          "--zero-redundancy", mlp->zero_redundancy,
          "actors and process modes: 1 (the default) shards the optimizer step over the "
          "trainer actors, which share one copy of the parameters (processes: in memory they "
          "all map; trainer_spec::zero_redundancy); 0: DDP's all-reduce and the whole step on "
          "every actor")
      ->check(CLI::Range(0, 1));
  mlp_cmd
      ->add_option("--device", mlp->device,
                   "cpu, or cuda / cuda:N: the replica's step on a GPU (WORKLOADS.md's gpu-step "
                   "with --mode single; actors and process modes: one GPU replica per process)")
      ->check([](const std::string& v) {
        try {
          (void)actorch::device(v);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  mlp_cmd->callback([mlp] { bench::run_ddp_mlp(*mlp, std::cout); });

  auto h2d = std::make_shared<bench::h2d_options>();
  auto* h2d_cmd = bench->add_subcommand(
      "h2d", "host-to-device copy GB/s from pinned and pageable memory, and a plain "
             "cudaMemcpyAsync loop from pinned memory (WORKLOADS.md h2d; needs a GPU)");
  h2d_cmd->add_option("--device", h2d->device, "the GPU")->default_str("cuda:0");
  h2d_cmd->add_option("--min-seconds", h2d->min_seconds, "time each measurement this long")
      ->check(CLI::Range(0.01, 60.0));
  h2d_cmd->callback([h2d] { bench::run_h2d(*h2d, std::cout); });

  auto rep = std::make_shared<bench::report_options>();
  auto* rep_cmd = bench->add_subcommand(
      "report", "every workload and its PyTorch peer, alternately for several rounds: a "
                "Markdown table of medians and ratios and a PNG plot");
  rep_cmd->add_option("--rounds", rep->rounds, "interleaved rounds")->check(CLI::Range(1, 50));
  rep_cmd->add_option("--out", rep->out_dir, "directory for report.md, report.png, raw.txt");
  rep_cmd->add_option("--peer-dir", rep->peer_dir,
                      "the PyTorch peer scripts (default $ACTORCH_PEER_DIR, else "
                      "../shared/bench/peer)");
  rep_cmd->add_option("--python", rep->python, "the Python that runs the peers (with torch)");
  rep_cmd->add_flag("--quick", rep->quick, "small sizes and few steps (a check, not figures)");
  rep_cmd->callback([rep] { bench::run_report(*rep, std::cerr); });

  auto im = std::make_shared<bench::images_options>();
  auto* im_cmd = bench->add_subcommand(
      "images", "images/s of the ImageFolder JPEG pipeline (RandomResizedCrop(224), flip, "
                "ToTensor, Normalize; batch 64)");
  im_cmd->add_option("--root", im->root, "the ImageFolder tree (bench/make_images.py)")->required();
  im_cmd->add_option("--workers", im->workers, "dataset workers")->check(CLI::Range(0, 64));
  im_cmd->add_option("--fuse", im->fuse,
                     "1: decode only the crop at a reduced scale; 0: "
                     "decode whole images (prints fused=0)");
  im_cmd
      ->add_option("--step-ms", im->step_ms,
                   "a third pass with a consumer spending this long on each batch: prints "
                   "images-starvation")
      ->check(CLI::Range(0.0, 10000.0));
  im_cmd
      ->add_option("--multiprocessing-context", im->multiprocessing_context,
                   "fork: the workers load in forked processes")
      ->check(CLI::IsMember({"", "fork"}));
  im_cmd->add_option("--trace", im->trace, "write a Chrome trace of the two passes");
  im_cmd->callback([im] { bench::run_images(*im, std::cout); });

  auto ld = std::make_shared<bench::loader_bench_options>();
  auto ld_transforms = std::make_shared<int>(0); // `loader --transforms 1`: loader-transforms
  for (const char* name : {"loader", "loader-raw"}) {
    const bool raw = std::string(name) == "loader-raw";
    auto* cmd = bench->add_subcommand(name, raw ? "the loader workload in one plain loop"
                                                : "samples/s through the actor data loader");
    cmd->add_option("--workers", ld->workers, "dataset worker actors")->check(CLI::Range(0, 64));
    cmd->add_option("--passes", ld->passes, "normalisation passes per sample")
        ->check(CLI::Range(0, 10000));
    cmd->add_option("--n", ld->n, "samples")->check(CLI::Range(int64_t(1), int64_t(1) << 32));
    if (raw) {
      cmd->add_option("--threads", ld->threads,
                      "share the loop's batches among this many threads, each taking the next "
                      "one (prints threads=T when above 1)")
          ->check(CLI::Range(1, 64));
      cmd->add_option("--pin-threads", ld->pin_workers,
                      "1: pin thread t to the t-th usable CPU, as `loader --pin-workers 1` pins "
                      "the workers (prints cpus=...)")
          ->check(CLI::Range(0, 1));
    } else {
      cmd->add_option("--trace", ld->trace,
                      "write a Chrome trace of the epoch (its start on the loop's thread, each "
                      "worker's loads, the sampler's deliveries)");
      cmd->add_option("--npy", ld->npy,
                      "load these .npy files (samples along their first dimension) instead of "
                      "the synthetic samples; prints loader-npy")
          ->delimiter(',');
      cmd->add_option("--multiprocessing-context", ld->multiprocessing_context,
                      "fork: the workers load in forked processes (the loader's "
                      "multiprocessing_context option; prints context=fork)")
          ->check(CLI::IsMember({"", "fork"}));
      cmd->add_option("--pin-workers", ld->pin_workers,
                      "1: pin the workers to the usable CPUs, worker i to the i-th (the "
                      "loader's worker_cpus option; prints worker_cpus=...)")
          ->check(CLI::Range(0, 1));
      cmd->add_option("--transforms", *ld_transforms,
                      "1: also Normalize + RandomCrop(32, padding 4) + RandomHorizontalFlip "
                      "per sample (prints loader-transforms)")
          ->check(CLI::Range(0, 1));
    }
    cmd->callback([ld, raw, ld_transforms] {
      if (!raw && *ld_transforms)
        return bench::run_loader_transforms(*ld, std::cout);
      raw ? bench::run_loader_raw(*ld, std::cout) : bench::run_loader(*ld, std::cout);
    });
  }
}

} // namespace actorch::cli
