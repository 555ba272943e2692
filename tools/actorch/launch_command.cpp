// `actorch launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
// [--use-local-rank-arg] PROGRAM ARGS...`: torchrun's launcher (comm/launch/launcher.hpp).
// torchrun's underscore spellings (--nproc_per_node, ...) are accepted too; --use-local-rank-arg is
// torch.distributed.launch's older convention of passing --local_rank=N to each rank.
#include <iostream>

#include "comm/launch/launcher.hpp"
#include "tools/actorch/commands.hpp"

namespace actorch::cli {

void add_launch(CLI::App& app) {
  auto opts = std::make_shared<dist::launch_options>();
  auto* cmd = app.add_subcommand("launch", "start N ranks of a program with torchrun's "
                                           "environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  cmd->add_option("--nproc-per-node,--nproc_per_node", opts->nproc_per_node, "ranks on this node")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--nnodes", opts->nnodes, "number of nodes")->check(CLI::Range(1, 65536));
  cmd->add_option("--node-rank,--node_rank", opts->node_rank, "this node's index");
  cmd->add_option("--master-addr,--master_addr", opts->master_addr, "rank 0's host");
  cmd->add_option("--master-port,--master_port", opts->master_port, "rank 0's store port")
      ->check(CLI::Range(1, 65535));
  cmd->add_flag("--use-local-rank-arg,--use_local_rank_arg", opts->use_local_rank_arg,
                "also pass --local_rank=N to each rank, after PROGRAM (torch.distributed.launch)");
  // PROGRAM and everything after it belong to the program, dashes included.
  cmd->prefix_command();
  cmd->footer("PROGRAM ARGS...: the program each rank runs, with its arguments");
  cmd->callback([opts, cmd] {
    opts->command = cmd->remaining();
    const int rc = dist::launch(*opts, std::cout, std::cerr);
    if (rc != 0)
      throw CLI::RuntimeError(rc);
  });
}

} // namespace actorch::cli
