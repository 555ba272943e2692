#include "comm/launch/supervisor.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/child_process.hpp"

namespace actorch::dist::launch_detail {

volatile std::sig_atomic_t g_forward_signal = 0;
volatile std::sig_atomic_t g_interrupted = 0;

void on_signal(int sig) {
  g_forward_signal = sig;
  g_interrupted = 1;
}

std::string describe_status(int rank, int status) {
  return "rank " + std::to_string(rank) + " " + describe_wait_status(status);
}

namespace {

// Whether a rank's death by `sig` is its own fault (Note [Elastic membership]): a bad access, a
// bad instruction or arithmetic, abort() (a failed assertion, an uncaught exception), a
// forbidden syscall, a breakpoint, or a write to a closed pipe. A lost machine or an
// operator's kill never looks like one of these.
bool crashed(int sig) {
  switch (sig) {
  case SIGSEGV:
  case SIGBUS:
  case SIGFPE:
  case SIGILL:
  case SIGABRT:
  case SIGSYS:
  case SIGTRAP:
  case SIGPIPE: return true;
  default: return false;
  }
}

void relay(child& c, std::ostream& out, bool flush_partial) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.out_fd, buf, sizeof buf);
    if (n > 0) {
      c.partial.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0) { // EOF
      ::close(c.out_fd);
      c.out_fd = -1;
      flush_partial = true;
    }
    break;
  }
  size_t start = 0;
  for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    out << "[rank" << c.rank << "]: " << std::string_view(c.partial).substr(start, nl - start + 1);
  c.partial.erase(0, start);
  if (flush_partial && !c.partial.empty()) {
    out << "[rank" << c.rank << "]: " << c.partial << '\n';
    c.partial.clear();
  }
  out.flush();
}

} // namespace

// Note [Rank process groups]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each rank leads a process group of its own (setpgid before exec), and the launcher signals
// the group, as torchrun's agent does: a rank that is a wrapper (a shell script, a Python
// script that runs another program) would otherwise leave its child, the real training process,
// running with parent pid 1 after SIGTERM, holding the output pipe the launcher waits on. The
// grace period then SIGKILL reach the group too, while the rank's output is open. A Ctrl-C in a
// terminal reaches the launcher (the foreground group), which forwards it. A process of the rank
// that makes a group or session of its own (setsid, a daemon) is out of reach, as under
// torchrun.

std::string supervise(std::vector<child>& kids, std::ostream& out, std::chrono::milliseconds grace,
                      bool forward_signals, const std::function<std::string()>& stop,
                      const lost_rank& lost) {
  std::string failure;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  bool killed = false;
  auto running = [&] {
    for (auto& c : kids)
      if (c.running || c.out_fd >= 0)
        return true;
    return false;
  };
  // Note [Rank process groups]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A rank's group, while the rank runs or its output is open (a
  // process it started may hold it after the rank itself ended).
  auto signal_all = [&](int sig) {
    for (auto& c : kids)
      if (c.own_group ? c.running || c.out_fd >= 0 : c.running)
        ::kill(c.own_group ? -c.pid : c.pid, sig);
  };
  // Stops every rank for `why`: SIGTERM now, SIGKILL after the grace period.
  auto stop_all = [&](std::string why) {
    failure = std::move(why);
    signal_all(SIGTERM);
    stop_deadline = std::chrono::steady_clock::now() + grace;
  };
  auto next_check = std::chrono::steady_clock::now();
  while (running()) {
    if (stop && failure.empty() && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      if (std::string why = stop(); !why.empty())
        stop_all(std::move(why));
    }
    if (forward_signals && g_forward_signal != 0) {
      const int sig = g_forward_signal;
      g_forward_signal = 0;
      signal_all(sig);
      if (failure.empty())
        failure = std::string("the launcher got signal ") + std::to_string(sig) + " (" +
                  strsignal(sig) + ") and forwarded it to every rank";
      stop_deadline = std::min(stop_deadline, std::chrono::steady_clock::now() + grace);
    }
    std::vector<pollfd> fds;
    std::vector<child*> owners;
    for (auto& c : kids)
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back(&c);
      }
    const int ready = ::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i)
      if (fds[i].revents != 0)
        relay(*owners[i], out, false);
    // Every child that has ended by now, those killed by a signal first: a rank that exits
    // non-zero because it noticed a killed peer ends after it, and the killed one is the
    // failure to name even when both are reaped in one pass.
    std::vector<std::pair<pid_t, int>> ended;
    for (int status = 0;;) {
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0)
        break;
      ended.emplace_back(pid, status);
    }
    std::stable_partition(ended.begin(), ended.end(),
                          [](const auto& e) { return WIFSIGNALED(e.second); });
    for (const auto& [pid, status] : ended) {
      std::vector<child> replacements;
      for (auto& c : kids) {
        if (c.pid != pid || !c.running)
          continue;
        c.running = false;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (ok || !failure.empty())
          continue;
        std::vector<int> survivors;
        for (const auto& k : kids)
          if (k.running)
            survivors.push_back(k.rank);
        lost_verdict v;
        if (lost && WIFSIGNALED(status) && !crashed(WTERMSIG(status)))
          v = lost(c, survivors, describe_status(c.rank, status));
        if (!v.go_on)
          stop_all(describe_status(c.rank, status));
        else if (v.replacement)
          replacements.push_back(std::move(*v.replacement));
      }
      for (auto& r : replacements)
        kids.push_back(std::move(r));
    }
    if (!killed && std::chrono::steady_clock::now() >= stop_deadline) {
      signal_all(SIGKILL);
      killed = true;
    }
  }
  return failure;
}

} // namespace actorch::dist::launch_detail
