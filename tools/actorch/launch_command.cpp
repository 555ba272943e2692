// `actorch launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
// [--standalone] [--rdzv-endpoint HOST:PORT] [--rdzv-backend c10d|static] [--rdzv-id ID]
// [--rdzv-timeout S] [--max-restarts R] [--elastic] [--use-local-rank-arg] [--insecure]
// [--no-python | -m] [--] PROGRAM ARGS...`: torchrun's launcher (comm/launch/launcher.hpp),
// with a job secret for its ranks' store by default (Note [Launch secrets]).
// torchrun's underscore spellings (--nproc_per_node, ...) are accepted too; --use-local-rank-arg is
// torch.distributed.launch's older convention of passing --local_rank=N to each rank.
//
// Note [Launch programs]
// ~~~~~~~~~~~~~~~~~~~~~~
// torchrun runs every PROGRAM as a Python script (`python -u PROGRAM`) unless --no-python says
// otherwise; actorch's ranks are as often C++ programs. So PROGRAM runs as it is, except that a
// PROGRAM ending in ".py" runs as `python3 -u PROGRAM` (python3 found on PATH, as the shell would
// find it) and -m MODULE as `python3 -u -m MODULE`, as torchrun runs them; --no-python runs even a
// ".py" as it is. An option launch does not know, before PROGRAM, is an error naming it before
// anything starts (CLI11 would take it for the program). A "--" ends launch's options: CLI11
// hands what follows it to the top-level command, where the callback finds it.
#include <unistd.h>

#include <chrono>
#include <iostream>

#include "base/error.hpp"
#include "base/parse.hpp"
#include "comm/host_identity.hpp"
#include "comm/launch/launcher.hpp"
#include "core/cuda_memory.hpp"
#include "tools/actorch/commands.hpp"

namespace actorch::cli {

namespace {

/// torchrun's --nproc-per-node: a number, or "cpu" (this machine's CPUs), "gpu" (its CUDA
/// devices) or "auto" (the devices when there are any, else the CPUs).
int ranks_per_node(const std::string& s) {
  const auto cpus = [] { return int(::sysconf(_SC_NPROCESSORS_ONLN)); };
  if (s == "cpu")
    return cpus();
  if (s == "gpu" || s == "auto") {
    const int gpus = cuda_device_count();
    if (gpus > 0 || s == "auto")
      return gpus > 0 ? gpus : cpus();
    ACTORCH_FAIL("launch: --nproc-per-node gpu, and this machine has no CUDA device (",
                 cuda_unavailable_reason(), ")");
  }
  return int(parse_int(s, "--nproc-per-node (a number, cpu, gpu or auto)", 1, 1024));
}

/// What launch's flags say beyond launch_options, kept alive by the callback (CLI11 writes into
/// them through references).
struct launch_flags {
  std::string nproc = "1", nnodes = "1", endpoint, backend;
  double rdzv_seconds = 0;
  bool standalone = false, no_python = false, module = false;
};

/// --nnodes: N, or torchrun's MIN:MAX with MIN equal to MAX (a fixed number of nodes).
int node_count(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos)
    return int(parse_int(s, "--nnodes", 1, 65536));
  const int64_t lo = parse_int(s.substr(0, colon), "--nnodes' MIN", 1, 65536);
  const int64_t hi = parse_int(s.substr(colon + 1), "--nnodes' MAX", 1, 65536);
  ACTORCH_CHECK(lo == hi, "launch: --nnodes ", s,
                ": a range of nodes (torchrun's elastic MIN:MAX) is not supported; give the "
                "number of nodes (--elastic heals lost ranks on one node instead)");
  return int(lo);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

} // namespace

void add_launch(CLI::App& app) {
  auto opts = std::make_shared<dist::launch_options>();
  auto flags = std::make_shared<launch_flags>();
  auto* cmd = app.add_subcommand("launch", "start N ranks of a program with torchrun's "
                                           "environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  cmd->add_option("--nproc-per-node,--nproc_per_node", flags->nproc,
                  "ranks on this node: a number, or cpu, gpu or auto (torchrun's)");
  cmd->add_option("--nnodes", flags->nnodes,
                  "number of nodes (torchrun's MIN:MAX is taken when MIN equals MAX)");
  cmd->add_option("--node-rank,--node_rank", opts->node_rank, "this node's index");
  cmd->add_option("--master-addr,--master_addr", opts->master_addr, "rank 0's host");
  cmd->add_option("--master-port,--master_port", opts->master_port,
                  "rank 0's store port (default: a free one on a single node, 29500 across nodes)")
      ->check(CLI::Range(1, 65535));
  cmd->add_flag("--standalone", flags->standalone,
                "one node, its store on a free port of 127.0.0.1 (torchrun's; --master-addr, "
                "--master-port and --rdzv-endpoint are then ignored, as torchrun ignores them)");
  cmd->add_option("--max-restarts,--max_restarts", opts->max_restarts,
                  "restart the whole job this many times when a rank fails (torchrun's)")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--rdzv-timeout,--rdzv_timeout", flags->rdzv_seconds,
                  "seconds the launchers of several nodes wait for each other, and after which a "
                  "silent node counts as lost (default 300)")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", flags->endpoint,
                  "HOST:PORT of the rendezvous (torchrun's; here: the master's address and port)");
  cmd->add_option("--rdzv-backend,--rdzv_backend", flags->backend,
                  "c10d or static (torchrun's): either way the launchers meet at node 0's store, "
                  "as torchrun's c10d rendezvous does")
      ->check(CLI::IsMember({"c10d", "static"}));
  cmd->add_option("--rdzv-id,--rdzv_id", opts->rdzv_id,
                  "the job's id (torchrun's): a node started for another job at the same "
                  "endpoint is refused, naming both");
  cmd->add_flag("--elastic", opts->elastic,
                "when a rank is killed, the others go on without it instead of stopping (one "
                "node; the program must regroup, as train_data_parallel's jobs do)");
  cmd->add_flag("--insecure", opts->insecure,
                "no job secret: the store admits anyone who reaches the port (needed across "
                "nodes when ACTORCH_JOB_TOKEN is not set; see docs/reliability.md)");
  cmd->add_flag("--use-local-rank-arg,--use_local_rank_arg", opts->use_local_rank_arg,
                "also pass --local_rank=N to each rank, after PROGRAM (torch.distributed.launch)");
  cmd->add_flag("--no-python,--no_python", flags->no_python,
                "run PROGRAM as it is even when it ends in .py (torchrun's)");
  cmd->add_flag("-m,--module", flags->module,
                "PROGRAM is a Python module: each rank runs python3 -u -m PROGRAM (torchrun's)");
  // PROGRAM and everything after it belong to the program, dashes included.
  cmd->prefix_command();
  cmd->footer("PROGRAM ARGS...: the program each rank runs, with its arguments (a PROGRAM ending "
              "in .py runs as python3 -u PROGRAM); a -- before PROGRAM ends launch's options");
  cmd->callback([opts, flags, cmd, &app] {
    const launch_flags& f = *flags;
    std::vector<std::string> program = cmd->remaining();
    if (program.empty()) // launch [OPTIONS] -- PROGRAM: Note [Launch programs]
      program = app.remaining();
    else
      ACTORCH_CHECK(program[0].empty() || program[0][0] != '-', "launch: unknown option '",
                    program[0],
                    "' (`actorch launch --help` lists launch's; a program's own "
                    "options go after the program, or put -- before a program named so)");
    ACTORCH_CHECK(!program.empty(), "launch: no program to run");
    opts->nproc_per_node = ranks_per_node(f.nproc);
    opts->nnodes = node_count(f.nnodes);
    if (f.rdzv_seconds > 0)
      opts->rdzv_timeout = std::chrono::milliseconds(int64_t(f.rdzv_seconds * 1000));
    if (f.standalone) {
      ACTORCH_CHECK(opts->nnodes == 1, "launch: --standalone runs one node, and --nnodes is ",
                    opts->nnodes);
      opts->master_addr = "127.0.0.1";
      opts->master_port = 0;          // a free one
    } else if (!f.endpoint.empty()) { // HOST:PORT, [v6]:PORT, or HOST alone (torchrun's port 29400)
      const auto [host, port] = dist::split_host_port(f.endpoint);
      ACTORCH_CHECK(!host.empty(), "launch: --rdzv-endpoint '", f.endpoint, "' has no host");
      opts->master_addr = host;
      opts->master_port =
          port.empty() ? 29400 : int(parse_int(port, "the port of --rdzv-endpoint", 1, 65535));
    }
    ACTORCH_CHECK(!(f.no_python && f.module), "launch: --no-python and -m cannot be used together "
                                              "(-m runs a Python module)");
    if (f.module)
      program.insert(program.begin(), {"python3", "-u", "-m"});
    else if (!f.no_python && ends_with(program[0], ".py"))
      program.insert(program.begin(), {"python3", "-u"});
    opts->command = std::move(program);
    const int rc = dist::launch(*opts, std::cout, std::cerr);
    if (rc != 0)
      throw CLI::RuntimeError(rc);
  });
}

} // namespace actorch::cli
