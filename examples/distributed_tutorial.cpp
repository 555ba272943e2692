// PyTorch's "Writing Distributed Applications" tutorial, in actorch: blocking and non-blocking
// point-to-point between ranks 0 and 1, then an all_reduce inside a subgroup. Start it with the
// launcher, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each rank:
//   ./build/release/tools/actorch launch --nproc-per-node 2
//   ./build/release/examples/distributed_tutorial
#include <iostream>

#include "comm/distributed.hpp"
#include "core/core.hpp"

using namespace actorch;
namespace dist = actorch::dist;

// Blocking point-to-point: rank 0 adds one to a zero tensor and sends it to rank 1.
void run_blocking(int rank) {
  tensor t = zeros({1});
  if (rank == 0) {
    t += 1;
    dist::send(t, 1);
  } else if (rank == 1) {
    dist::recv(t, 0);
  }
  std::cout << "Rank " << rank << " has data " << t[0] << " (blocking)\n";
}

// Non-blocking point-to-point: isend/irecv return at once; wait() before touching the tensor.
void run_non_blocking(int rank) {
  tensor t = zeros({1});
  dist::work req;
  if (rank == 0) {
    t += 2;
    req = dist::isend(t, 1);
    std::cout << "Rank 0 started sending\n";
  } else if (rank == 1) {
    req = dist::irecv(t, 0);
    std::cout << "Rank 1 started receiving\n";
  }
  if (rank <= 1)
    req.wait();
  std::cout << "Rank " << rank << " has data " << t[0] << " (non-blocking)\n";
}

// All-reduce in a group of ranks 0 and 1: every rank calls new_group, members reduce.
void run_all_reduce(int rank) {
  dist::group group = dist::new_group({0, 1});
  tensor t = ones({1});
  if (dist::get_rank(group) >= 0)
    dist::all_reduce(t, dist::reduce_op::sum, group);
  std::cout << "Rank " << rank << " has data " << t[0] << " (all_reduce in group [0, 1])\n";
}

int main() try {
  dist::init_process_group({.backend = "gloo"}); // env:// from the launcher's variables
  const int rank = dist::get_rank();
  if (dist::get_world_size() < 2) {
    std::cerr
        << "distributed_tutorial needs at least 2 ranks (actorch launch --nproc-per-node 2)\n";
    return 1;
  }
  run_blocking(rank);
  run_non_blocking(rank);
  run_all_reduce(rank);
  dist::barrier(); // nobody closes its connections while a peer still talks
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::cerr << "distributed_tutorial: " << e.what() << "\n";
  return 1;
}
