// The main job: the digits MLP trained data-parallel over processes, each with trainer actors
// fed by the actor data pipeline, gradients exchanged in buckets by the comm actors over Gloo.
//
//   actorch launch --nproc-per-node 2 build/release/examples/digits_ddp --out digits-run
//     [--epochs 30] [--batch-size 32] [--num-workers 1] [--actors 1] [--trace trace.json]
//     [--resume digits-run/digits_ddp.safetensors] [--checkpoint-every N] [--max-steps N]
//     [--device cuda] [--sample-log PATH]
//
// --resume takes a checkpoint of a job of any world size: one written mid-epoch by 2 processes
// resumes under --nproc-per-node 3 with the rest of that epoch divided among the 3.
//
// With --device cuda each process trains on cuda:LOCAL_RANK and the job's group is NCCL.
//
// Rank 0 shows the progress and writes digits-run/{digits_ddp.safetensors, metrics.csv,
// curves.png}. Started without the launcher it runs as a job of one process.
#include <cstdio>
#include <cstdlib>

#include "comm/distributed.hpp"
#include "examples/digits_training.hpp"

int main(int argc, char** argv) try {
  digits::options o = digits::parse(argc, argv, "digits_ddp");
  std::shared_ptr<actorch::dist::process_group> pg;
  const bool gpu = o.device.is_cuda();
  if (std::getenv("WORLD_SIZE") != nullptr) { // started by a launcher: join its job
    actorch::dist::init_process_group({.backend = gpu ? "nccl" : "gloo",
                                       .init_method = "env://",
                                       .timeout = std::chrono::milliseconds(60000)});
    pg = actorch::dist::world();
    if (gpu) // one GPU per process, the NCCL group's: cuda:LOCAL_RANK, as torchrun's scripts do
      o.device = pg->collective_device();
  }
  const double acc = digits::run(o, pg);
  if (pg)
    actorch::dist::destroy_process_group();
  return pg && pg->rank() != 0 ? 0 : (acc >= 0 ? 0 : 1);
} catch (const std::exception& e) {
  std::fprintf(stderr, "digits_ddp: %s\n", e.what());
  return 1;
}
