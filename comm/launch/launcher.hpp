// Starting ranks as processes: launch() runs a program N times per node with torchrun's
// environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// prefixing each line of their output with the rank; spawn() forks N copies of this process
// running a function (torch.multiprocessing.spawn). Both supervise their children: when one
// exits non-zero or is killed, the others are stopped and the failure is reported by rank.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace actorch::dist {

struct launch_options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  /// 0: a free port when the job is this node alone (torchrun --standalone's choice, so that
  /// jobs started side by side do not collide on one port), 29500 across nodes.
  int master_port = 0;
  /// The program and its arguments.
  std::vector<std::string> command;
  /// torch.distributed.launch's convention (its default before --use-env): each rank also
  /// gets `--local_rank=N` as its first argument after the program, for programs that parse it
  /// instead of reading LOCAL_RANK (which is set either way).
  bool use_local_rank_arg = false;
  /// How long the others get to exit after SIGTERM (when one failed) before SIGKILL.
  std::chrono::milliseconds grace{3000};
  /// torchrun's --max-restarts: when a rank fails, the others are stopped and the whole job
  /// starts again, up to this many times (elastic: lost ranks replaced, up to this many); each rank
  /// sees TORCHELASTIC_RESTART_COUNT. Across nodes every node's launcher restarts its ranks
  /// together (Note [Node restarts]).
  int max_restarts = 0;
  /// Several nodes: how long the launchers wait for each other at their store (node 0 hosts
  /// it on master_port and the ranks join it, as torchrun's agent store).
  std::chrono::milliseconds rdzv_timeout{300000};
  /// Note [Elastic membership] (launcher.cpp): a rank killed by a signal does not stop the
  /// others; they go on without it, or with a replacement while max_restarts allows (one
  /// node).
  bool elastic = false;
  /// torchrun's --rdzv-id: across nodes, node 0 publishes it and a node started with another
  /// is refused, naming both (two jobs given one endpoint by mistake).
  std::string rdzv_id;
  /// Note [Launch secrets]: true runs the job with an open store (no job secret made on one
  /// node, none required across nodes).
  bool insecure = false;
};

/// Runs the ranks of this node and waits for them. Unless the environment already names a job
/// secret (ACTORCH_JOB_TOKEN or ACTORCH_JOB_TOKEN_FILE) or `insecure` is set, a job on one node
/// gets a random one, and a job across nodes is refused (Note [Launch secrets]). Returns 0 when all
/// exited 0; otherwise writes to `err` which rank failed and how ("rank 1 exited with status 3",
/// "rank 0 was killed by signal 9 (Killed)"), restarts the job while max_restarts allows (saying
/// which restart it is), and returns non-zero when none is left. SIGINT and SIGTERM sent to the
/// launcher are forwarded to every rank. Throws actorch::error for bad options.
int launch(const launch_options& opts, std::ostream& out, std::ostream& err);

struct spawn_options {
  std::chrono::milliseconds grace{3000};
};

/// Forks `nprocs` children, each running fn(rank) with RANK, LOCAL_RANK and WORLD_SIZE set
/// (MASTER_ADDR/MASTER_PORT are left as the caller set them), and waits for all. A child whose
/// fn throws prints the message and exits 1. Throws actorch::error naming the first rank that
/// failed and how, after stopping the others. @pre no other thread of this process holds a lock
/// the children need (fork copies only the calling thread).
void spawn(const std::function<void(int)>& fn, int nprocs, const spawn_options& opts = {});

/// A TCP port held for a master's store while this object lives (Note [Reserved ports] in
/// launcher.cpp): a socket bound to it on every address without listening, which a store's
/// own bind (SO_REUSEADDR, as actorch's and torch's TCPStore bind) shares and nothing else
/// can: no other reservation, no socket the kernel numbers itself, no plain bind. The port is
/// a random one of the 8192 below the kernel's ephemeral range (Note [Ports below the
/// ephemeral range]); the kernel's own pick where that range leaves no room. Connecting to it
/// is refused until its store listens. Throws actorch::error when no port can be bound.
class port_reservation {
public:
  port_reservation();
  ~port_reservation();
  port_reservation(port_reservation&& other) noexcept;
  port_reservation& operator=(port_reservation&& other) noexcept;
  port_reservation(const port_reservation&) = delete;
  port_reservation& operator=(const port_reservation&) = delete;
  int port() const { return port_; }

private:
  int fd_ = -1;
  int port_ = 0;
};

/// A port for a MASTER_PORT of a job on one host: a port_reservation kept until this process
/// exits, so that between this call and the store's bind no other job (another test's rank 0,
/// another launcher) can take it. Each call holds one more socket; a caller that starts many
/// jobs in one long-lived process holds a port_reservation per job instead.
int free_port();

} // namespace actorch::dist
