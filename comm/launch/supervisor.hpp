// The launcher's supervision of its ranks (launch() and spawn() in launcher.cpp): the children
// it forked, one loop that relays their prefixed output, reaps them, stops the others when one
// fails and forwards SIGINT and SIGTERM (Note [Rank process groups]). Internal to comm/launch.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace actorch::dist::launch_detail {

struct child {
  int rank = 0; // global rank, for messages
  pid_t pid = -1;
  int out_fd = -1; // read end of its stdout+stderr, -1 when not relayed
  std::string partial;
  bool running = true;
  bool own_group = false; // leads a process group of its own: signalled as a group
};

/// Set by on_signal, the launcher's SIGINT and SIGTERM handler: the signal to forward (supervise
/// clears it), and whether one came at all (no restart after it).
extern volatile std::sig_atomic_t g_forward_signal;
extern volatile std::sig_atomic_t g_interrupted;
void on_signal(int sig);

/// "rank 3 exited with status 1", "rank 0 was killed by signal 9 (Killed)".
std::string describe_status(int rank, int status);

/// What supervise's `lost` answers about a rank killed by a signal.
struct lost_verdict {
  bool go_on = false;
  std::optional<child> replacement;
};
using lost_rank = std::function<lost_verdict(const child& gone, const std::vector<int>& survivors,
                                             const std::string& why)>;

/// Waits for every child. Returns "" when all exited 0, else the first failure's description
/// (the others were stopped: SIGTERM, then SIGKILL after `grace`). `stop`, when given, is asked
/// every 100 ms whether to stop them all anyway (a reason) or not ("").
/// `lost`: asked about a rank killed by a signal (Note [Elastic membership]): whether the job
/// goes on without it, and the replacement started in its place if there is one; not going on
/// (or no `lost`) stops the others.
std::string supervise(std::vector<child>& kids, std::ostream& out, std::chrono::milliseconds grace,
                      bool forward_signals, const std::function<std::string()>& stop = nullptr,
                      const lost_rank& lost = nullptr);

} // namespace actorch::dist::launch_detail
