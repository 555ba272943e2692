// `actorch launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
// [--rdzv-endpoint HOST:PORT] [--rdzv-timeout S] [--max-restarts R] [--elastic]
// [--use-local-rank-arg] [--insecure]
// PROGRAM ARGS...`: torchrun's launcher (comm/launch/launcher.hpp), with a job secret for its
// ranks' store by default (Note [Launch secrets]).
// torchrun's underscore spellings (--nproc_per_node, ...) are accepted too; --use-local-rank-arg is
// torch.distributed.launch's older convention of passing --local_rank=N to each rank.
#include <chrono>
#include <iostream>

#include "base/error.hpp"
#include "base/parse.hpp"
#include "comm/host_identity.hpp"
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
  cmd->add_option("--master-port,--master_port", opts->master_port,
                  "rank 0's store port (default: a free one on a single node, 29500 across nodes)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--max-restarts,--max_restarts", opts->max_restarts,
                  "restart the whole job this many times when a rank fails (torchrun's)")
      ->check(CLI::Range(0, 1000));
  auto rdzv_seconds = std::make_shared<double>(0);
  cmd->add_option("--rdzv-timeout,--rdzv_timeout", *rdzv_seconds,
                  "seconds the launchers of several nodes wait for each other, and after which a "
                  "silent node counts as lost (default 300)")
      ->check(CLI::Range(0.1, 86400.0));
  auto endpoint = std::make_shared<std::string>();
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", *endpoint,
                  "HOST:PORT of the rendezvous (torchrun's; here: the master's address and port)");
  cmd->add_flag("--elastic", opts->elastic,
                "when a rank is killed, the others go on without it instead of stopping (one "
                "node; the program must regroup, as train_data_parallel's jobs do)");
  cmd->add_flag("--insecure", opts->insecure,
                "no job secret: the store admits anyone who reaches the port (needed across "
                "nodes when ACTORCH_JOB_TOKEN is not set; see the README)");
  cmd->add_flag("--use-local-rank-arg,--use_local_rank_arg", opts->use_local_rank_arg,
                "also pass --local_rank=N to each rank, after PROGRAM (torch.distributed.launch)");
  // PROGRAM and everything after it belong to the program, dashes included.
  cmd->prefix_command();
  cmd->footer("PROGRAM ARGS...: the program each rank runs, with its arguments");
  cmd->callback([opts, cmd, endpoint, rdzv_seconds] {
    if (*rdzv_seconds > 0)
      opts->rdzv_timeout = std::chrono::milliseconds(int64_t(*rdzv_seconds * 1000));
    if (!endpoint->empty()) { // HOST:PORT, [v6]:PORT, or HOST alone (torchrun's port 29400)
      const auto [host, port] = dist::split_host_port(*endpoint);
      ACTORCH_CHECK(!host.empty(), "launch: --rdzv-endpoint '", *endpoint, "' has no host");
      opts->master_addr = host;
      opts->master_port =
          port.empty() ? 29400 : int(parse_int(port, "the port of --rdzv-endpoint", 1, 65535));
    }
    opts->command = cmd->remaining();
    const int rc = dist::launch(*opts, std::cout, std::cerr);
    if (rc != 0)
      throw CLI::RuntimeError(rc);
  });
}

} // namespace actorch::cli
