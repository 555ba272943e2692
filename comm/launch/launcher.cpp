// launch() and spawn(): fork the ranks, then supervise them (supervisor.cpp); across nodes, the
// launchers meet through node 0's store (node_coordinator). Ports: ports.cpp.
#include "comm/launch/launcher.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/child_process.hpp"
#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"
#include "base/text.hpp"
#include "comm/elastic.hpp"
#include "comm/launch/supervisor.hpp"
#include "comm/store/job_crypto.hpp"
#include "comm/store/tcp_store.hpp"

namespace actorch::dist {

using namespace launch_detail;

namespace {

void set_env(const char* name, const std::string& value) {
  ::setenv(name, value.c_str(), 1);
}

} // namespace

namespace {

// Note [Launch secrets]
// ~~~~~~~~~~~~~~~~~~~~~
// The ranks' store admits only connections that prove the job secret (Note [Job secret] in
// tcp_store_server.cpp), but only when the ranks have one. So the launcher makes sure they do:
// a secret already in its environment (ACTORCH_JOB_TOKEN, or ACTORCH_JOB_TOKEN_FILE's first
// line) is passed on as it is; otherwise a job on one node gets 32 random bytes, hex, that only
// its ranks see (in their environment, readable by the same user alone). Across nodes the
// launchers cannot agree on a secret without a channel the attacker lacks, so a job without
// one is refused unless the user asks for an open store plainly (--insecure). A torch program
// started by the launcher hosts torch's own TCPStore, which ignores the secret: its store is as
// open as under torchrun (docs/reliability.md).
std::string job_token_for_ranks(const launch_options& o) {
  if (o.insecure || !job_secret().empty()) // an unreadable ACTORCH_JOB_TOKEN_FILE throws here
    return "";
  ACTORCH_CHECK(o.nnodes == 1,
                "launch: a job across nodes needs one job secret on every node, "
                "so that only its own ranks and launchers can use its store: set "
                "ACTORCH_JOB_TOKEN (or ACTORCH_JOB_TOKEN_FILE, a file whose first line is the "
                "secret) to the same secret on every node, or pass --insecure to run with a "
                "store that anyone who reaches port ",
                o.master_port, " may read and write");
  const std::string bytes = random_bytes(32, "launch's job secret");
  return to_hex(bytes.data(), bytes.size());
}

// The global rank of this node's rank `local`.
int global_rank(const launch_options& o, int local) {
  return o.node_rank * o.nproc_per_node + local;
}

// torchrun's default against oversubscribed CPUs: one OpenMP (and OpenBLAS) thread per rank when
// there are several ranks and the user set none.
bool sets_omp_threads(const launch_options& o) {
  return o.nproc_per_node > 1 && !env("OMP_NUM_THREADS");
}

// The environment of rank `local` of this node for attempt `restart`: the launcher's own, with
// the variables every rank reads set (torchrun's names, and actorch's for secrets and elastic
// jobs); `joining`: the n-th replacement for a lost rank of an elastic job (Note [Elastic
// membership]), 0 for none.
std::vector<std::string> rank_environment(const launch_options& o, const std::string& token,
                                          int restart, int local, int joining) {
  const int world = o.nproc_per_node * o.nnodes;
  std::vector<std::pair<std::string, std::string>> set{
      {"RANK", std::to_string(global_rank(o, local))},
      {"LOCAL_RANK", std::to_string(local)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      // torchrun's names: a program sees which restart this is as it would under torchrun.
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.rdzv_id.empty() ? "none" : o.rdzv_id},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", std::to_string(global_rank(o, local))},
      {"ROLE_WORLD_SIZE", std::to_string(world)}};
  if (sets_omp_threads(o)) // launch() says so once
    set.emplace_back("OMP_NUM_THREADS", "1");
  if (!token.empty()) // See Note [Launch secrets]
    set.emplace_back("ACTORCH_JOB_TOKEN", token);
  if (o.nnodes > 1 || o.elastic)
    set.emplace_back("TORCHELASTIC_USE_AGENT_STORE", "True");
  if (o.elastic) { // Note [Elastic membership]
    set.emplace_back("ACTORCH_ELASTIC", "1");
    set.emplace_back("ACTORCH_GLOO_SHM", "0"); // a dead peer breaks a socket at once, not a spin
    // How long a rank whose collective failed waits for the next membership: on one node a
    // death is seen at once; across nodes a silent node only after the launchers' timeout.
    set.emplace_back("ACTORCH_ELASTIC_WAIT_MS",
                     std::to_string(o.nnodes > 1 ? o.rdzv_timeout.count() + 5000 : 30000));
    if (joining > 0)
      set.emplace_back("ACTORCH_ELASTIC_JOIN", std::to_string(joining));
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; }))
      env.emplace_back(entry);
  }
  for (const auto& [name, value] : set)
    env.push_back(name + "=" + value);
  return env;
}

// Forks rank `local` of this node for attempt `restart`, its output on a pipe; `joining` as
// rank_environment's. A child with pid -1 and `failure` set when the fork failed.
//
// The launcher has threads when it forks (its store's loop, an elastic job's watch), and a lock
// one of them held at that moment stays held in the child. So everything the child needs (its
// environment, argv, the message should exec fail) is made here, and between fork and exec the
// child only makes async-signal-safe calls: no malloc, no setenv. It used to set its variables
// with setenv, and under ASan (whose allocator in GCC 12 has no fork handler) a rank now and then
// waited forever on the allocator's lock before exec, and the others at the rendezvous.
child start_rank(const launch_options& o, const std::string& token, int restart, int local,
                 int joining, std::string& failure) {
  const int rank = global_rank(o, local);
  const std::vector<std::string> env = rank_environment(o, token, restart, local, joining);
  // torch.distributed.launch puts --local_rank=N right after the script, before its arguments.
  std::vector<std::string> args = o.command;
  if (o.use_local_rank_arg)
    args.insert(args.begin() + 1, "--local_rank=" + std::to_string(local));
  std::vector<char*> envp = exec_args(env), argv = exec_args(args);
  const std::string cannot_run = "actorch launch: cannot run '" + args[0] + "': ";
  const std::string& program = args[0];
  const bool script = program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
  const std::string script_hint =
      script ? " (a Python script run as it is: without --no-python, actorch launch runs it "
               "with python3; or give it a #! line and the execute bit)"
             : "";
  int fds[2];
  ACTORCH_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
  std::cout.flush();
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    die_with_parent(launcher);
    ::setpgid(0, 0); // Note [Rank process groups]
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int exec_errno = errno;
    const char* why = ::strerrordesc_np(exec_errno); // a static string, unlike strerror's
    if (why == nullptr)
      why = "unknown error";
    const auto say = [](const char* text, size_t n) { (void)!::write(STDERR_FILENO, text, n); };
    say(cannot_run.data(), cannot_run.size());
    say(why, std::strlen(why));
    if (exec_errno == EACCES || exec_errno == ENOEXEC)
      say(script_hint.data(), script_hint.size());
    say("\n", 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    failure = std::string("fork failed: ") + std::strerror(errno);
    return child{rank, -1, -1, {}, false};
  }
  ::setpgid(pid, pid); // (as the child does: whichever runs first, the group exists at exec)
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return child{rank, pid, fds[0], {}, true, true};
}

// One attempt of the job: starts this node's ranks (restart `restart` of the job) and waits
// for them; "" when all exited 0, else which rank failed and how, or why `stop` stopped them.
// Across nodes the ranks join the launchers' store (Note [Node restarts]).
std::string run_attempt(const launch_options& o, const std::string& token, int restart,
                        std::ostream& out, const std::function<std::string()>& stop,
                        const lost_rank& lost) {
  std::vector<child> kids;
  std::string failure;
  for (int local = 0; local < o.nproc_per_node && failure.empty(); ++local) {
    out.flush();
    child c = start_rank(o, token, restart, local, 0, failure);
    if (c.pid > 0)
      kids.push_back(std::move(c));
  }
  if (!failure.empty())
    for (auto& c : kids)
      ::kill(c.pid, SIGTERM);
  const std::string f = supervise(kids, out, o.grace, true, stop, lost);
  return failure.empty() ? f : failure;
}

// Note [Node restarts]
// ~~~~~~~~~~~~~~~~~~~~
// On one node the launcher restarts its ranks on its own. Across nodes every launcher must
// restart, and the new ranks must not meet the old ones' keys. So, as torchrun's agents do,
// node 0's launcher hosts a store on MASTER_PORT that outlives the ranks, and every rank joins
// it as a client under its attempt's prefix (TORCHELASTIC_USE_AGENT_STORE,
// /worker/attempt_N). The store's "/launch/generation" is the job's attempt. A launcher whose
// rank fails records why under "/launch/reason/N+1" (the first to fail wins), then moves the
// generation from N to N + 1 (compare-and-set: two failing nodes restart the job once). Every
// launcher watches it while its ranks run, and when it moves, stops its own ranks and starts
// them again as attempt N + 1, saying which node's rank failed and how; when no restart is
// left, they stop their ranks and fail too. A launcher whose ranks all succeeded adds itself
// to "/launch/done/N" and waits (an exit barrier, as torchrun's agents have) until every node
// has, or the attempt moves on, or the launchers' timeout passes: a node whose ranks finished
// while another node's rank was killed then restarts its ranks with the others (they resume
// from their checkpoint), or fails with them when no restart is left, so that every node
// restarts as often and ends as the others do. Before, such a node exited 0, node 0's taking
// the store with it, and the other node's launcher crashed mid-restart, its new rank orphaned.
// The other nodes then add themselves to "/launch/left/N", and node 0 keeps the store up until
// they all have (bounded by the timeout), so that none finds the store gone while it looks.
//
// Note [Supervision off the network]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Supervision (reaping ranks, relaying their output, forwarding signals) must never wait on
// the network: a cut link would otherwise hold it inside a store call for the whole store
// timeout, deaf to SIGTERM, its exited rank a zombie. So the store is watched from a thread of
// its own (node_coordinator::watch), which the supervision loop only asks for a verdict. The
// watcher also beats a heartbeat ("/launch/heartbeat/K", every 200 ms), and node 0's watcher
// reads the others': a node not heard from for the launchers' timeout (a cut link, a stopped
// or killed launcher) stops node 0's ranks, as a node whose watcher cannot reach the store
// stops its own. Both then exit non-zero saying why, without the calls that would wait on the
// network again (moving the generation, waiting for the others to finish).
// The calls launch()'s thread must still make after an attempt (fail, done, reason) run through
// bounded(): on a thread of their own, waited for until the launchers' timeout after the store
// last answered anyone on this node. A link cut while the ranks ran, which the ranks noticed
// first (their collectives' timeout is shorter), then ends the launcher one timeout after the
// cut, saying the link to node 0 was lost; a call of its own would have waited a whole timeout
// more from its start (366 s after a cut with --rdzv-timeout 300, ending on a bare store error).
class node_coordinator {
public:
  /// `token`: the ranks' job secret when the launcher made one (Note [Launch secrets]).
  node_coordinator(const launch_options& o, const std::string& token)
      : o_(o), store_(o.master_addr, uint16_t(o.master_port), o.node_rank == 0, o.rdzv_timeout,
                      token.empty() ? std::nullopt : std::optional<std::string>(token)) {
    if (o.node_rank != 0) {
      const std::string job = store_.get(kRdzvId);
      ACTORCH_CHECK(job == o.rdzv_id, "launch: the rendezvous at ", o.master_addr, ":",
                    o.master_port, " belongs to job '", job,
                    "' (its node 0's --rdzv-id), and node ", o.node_rank, " was started for job '",
                    o.rdzv_id, "'");
      return;
    }
    store_.set(kRdzvId, o.rdzv_id);
    store_.set(kGeneration, "0");
    if (o.elastic) { // Note [Elastic membership]: membership 0 is every rank of every node
      std::vector<int> everyone(size_t(o.nnodes * o.nproc_per_node));
      std::iota(everyone.begin(), everyone.end(), 0);
      store_.set(std::string(elastic::members_key) + "0", elastic::rank_list(everyone));
      store_.set(elastic::generation_key, "0");
    }
  }

  /// An elastic job's membership change this node's supervision asks for: ranks lost, and
  /// those of them a replacement now runs as. Published by the watcher thread, so that the
  /// supervision loop never waits on the network; returns at once.
  struct change {
    std::vector<int> lost, replaced;
    std::string why;
    std::string replacement; // "replacement 1 of 2"
  };
  void publish_later(change c) {
    {
      std::lock_guard lock(pending_mu_);
      pending_.push_back(std::move(c));
    }
    pending_cv_.notify_all();
  }

  /// Waits up to the launchers' timeout for the watcher to publish what publish_later() gave
  /// it (after this node's ranks ended: its last lost rank's change must not be dropped).
  void flush() {
    std::unique_lock lock(pending_mu_);
    pending_cv_.wait_for(lock, o_.rdzv_timeout, [&] { return pending_.empty(); });
  }

  /// What the watcher published since the last call, one line each (launch()'s thread prints
  /// them).
  std::vector<std::string> take_messages() {
    std::lock_guard lock(pending_mu_);
    return std::exchange(messages_, {});
  }

  int generation() { return parse_generation(store_.get(kGeneration)); }

  /// Runs `fn(coordinator)` (store calls) on a thread of its own and waits for it until the
  /// launchers' timeout after the store last answered this node; the result, or nullopt when
  /// the store stayed silent that long (lost_link() then says why). `fn`'s error is rethrown.
  template <class T>
  static std::optional<T> bounded(const std::shared_ptr<node_coordinator>& self,
                                  std::function<T(node_coordinator&)> fn) {
    auto task = std::make_shared<std::packaged_task<T()>>([self, fn = std::move(fn)] {
      T out = fn(*self);
      self->touch();
      return out;
    });
    std::future<T> result = task->get_future();
    std::thread([task] { (*task)(); }).detach(); // one stuck on the network is left behind
    for (;;) {
      if (result.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready)
        return result.get();
      if (self->silent_for() > self->o_.rdzv_timeout)
        return std::nullopt;
    }
  }

  /// Why this node gives up on the store, once silent_for() passed the launchers' timeout.
  std::string lost_link(const std::string& detail) const {
    const auto ms = [](auto d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
    };
    return "node " + std::to_string(o_.node_rank) + " lost the link to node 0: the launchers' " +
           "store at " + o_.master_addr + ":" + std::to_string(o_.master_port) +
           " has not answered for " + ms(silent_for()) + " ms (the launchers' timeout, " +
           "--rdzv-timeout, is " + ms(o_.rdzv_timeout) + " ms)" +
           (detail.empty() ? std::string() : ": " + detail);
  }

  /// What a watcher found: why to stop this node's ranks ("" while nothing), the attempt the
  /// job moved to, and whether the store itself was lost.
  struct verdict {
    std::string reason;
    int moved_to = -1;
    bool lost = false;
  };

  /// Starts watching attempt g from a thread of its own (Note [Supervision off the network]);
  /// `self` keeps the coordinator alive for it. The previous watch ends.
  static void watch(const std::shared_ptr<node_coordinator>& self, int g) {
    self->unwatch();
    self->watch_ = std::make_shared<watch_state>();
    std::thread([self, w = self->watch_, g] { self->run_watch(*w, g); }).detach();
  }

  /// Asks the watcher to stop; does not wait for it (it may be inside a store call).
  void unwatch() {
    if (watch_) {
      watch_->stop = true;
      pending_cv_.notify_all();
      last_watch_ = watch_;
    }
    watch_.reset();
  }

  /// At launch()'s end: waits up to `limit` for the last watcher to return, so that it is not
  /// still inside the store's calls (OpenSSL's among them) while the process exits and frees
  /// them; one stuck on the network is left behind after `limit`.
  void wait_unwatched(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (last_watch_ && !last_watch_->done && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  /// The current watch's verdict; never waits on the network.
  verdict current() {
    if (!watch_)
      return {};
    std::lock_guard lock(watch_->mu);
    return watch_->found;
  }

  // This node's rank failed in attempt g: the attempt to run next (g + 1, or a later one
  // another node already moved to). Called also when no restart is left, so that the other
  // nodes stop their ranks too.
  int fail(int g, const std::string& why) {
    // The reason first (the first node to fail writes it), then the generation: a launcher
    // that sees the generation move always finds why.
    store_.compare_set(reason_key(g + 1), "", std::to_string(o_.node_rank) + "\n" + why);
    const std::string moved =
        store_.compare_set(kGeneration, std::to_string(g), std::to_string(g + 1));
    return std::max(parse_generation(moved), g + 1);
  }

  // This node's ranks all succeeded in attempt g: waits for the other nodes' (Note [Node
  // restarts]). The attempt the job moved to when another node's rank failed meanwhile, else -1.
  int done(int g) {
    const std::string done_key = "/launch/done/" + std::to_string(g);
    const std::string left_key = "/launch/left/" + std::to_string(g);
    store_.add(done_key, 1);
    const auto deadline = std::chrono::steady_clock::now() + o_.rdzv_timeout;
    // An elastic job's lost nodes report nothing (Note [Elastic membership]).
    const auto lost_nodes = [&] { return o_.elastic ? store_.add(kLostNodes, 0) : 0; };
    const auto wait_for = [&](const std::string& key, int64_t others) {
      while (std::chrono::steady_clock::now() < deadline) {
        if (const int now = generation(); now > g)
          return now;
        if (store_.add(key, 0) >= others - lost_nodes())
          return -1;
        touch();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      return -1; // the timeout: leave as before (a node that never reports is its own failure)
    };
    if (const int moved = wait_for(done_key, o_.nnodes); moved > g)
      return moved;
    if (o_.node_rank != 0) {
      store_.add(left_key, 1);
      return -1;
    }
    wait_for(left_key, o_.nnodes - 1); // the store stays up until the others have looked
    return -1;
  }

  // Why the job moved to attempt g: "node K: <what failed>".
  std::string reason(int g) {
    const std::string r = store_.get(reason_key(g)); // fail() wrote "<node>\n<why>"
    const size_t nl = r.find('\n');
    return "node " + r.substr(0, nl) + ": " + r.substr(nl + 1);
  }

private:
  static constexpr const char* kGeneration = "/launch/generation";
  static constexpr const char* kRdzvId = "/launch/rdzv_id";
  static constexpr const char* kLostNodes = "/elastic/lost_nodes";

  // Publishes `c` as the next membership: the newest one without c.lost, with c.replaced
  // (Note [Elastic membership]). Launchers of several nodes may publish at once: each claims
  // membership G + 1 by compare-and-set and, when another claimed it first, applies its change
  // on top of that one.
  void publish(const change& c) {
    int64_t g = parse_int(store_.get(elastic::generation_key), "the job's membership", 0);
    for (;;) {
      std::vector<int> members =
          elastic::parse_rank_list(store_.get(elastic::members_key + std::to_string(g)),
                                   "launch: membership " + std::to_string(g));
      std::erase_if(members, [&](int r) {
        return std::find(c.lost.begin(), c.lost.end(), r) != c.lost.end();
      });
      members.insert(members.end(), c.replaced.begin(), c.replaced.end());
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      const std::string list = elastic::rank_list(members);
      const std::string key = elastic::members_key + std::to_string(g + 1);
      if (store_.compare_set(key, "", list) != list) {
        ++g; // another launcher's change came first
        continue;
      }
      store_.set(elastic::generation_key, std::to_string(g + 1));
      const std::string lost = elastic::rank_list(c.lost);
      std::lock_guard lock(pending_mu_);
      messages_.push_back(c.why + "; the job goes on with " +
                          (members.empty() ? std::string("no rank")
                                           : (members.size() > 1 ? "ranks " : "rank ") + list) +
                          " (--elastic, membership " + std::to_string(g + 1) + ", " +
                          (c.replaced.empty()
                               ? "without rank" + std::string(c.lost.size() > 1 ? "s " : " ") + lost
                               : "rank " + lost + " replaced: " + c.replacement) +
                          ")");
      return;
    }
  }
  static std::string reason_key(int g) { return "/launch/reason/" + std::to_string(g); }
  static std::string heartbeat_key(int node) { return "/launch/heartbeat/" + std::to_string(node); }
  static int parse_generation(const std::string& text) {
    return int(parse_int(text, "the launchers' generation", 0, 1 << 30));
  }

  struct watch_state {
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false}; // run_watch returned
    std::mutex mu;
    verdict found;
  };

  void run_watch(watch_state& w, int g) {
    struct mark_done {
      watch_state& w;
      ~mark_done() { w.done = true; }
    } mark{w};
    using clock = std::chrono::steady_clock;
    // Node 0: each other node's last heartbeat count, and when it last changed.
    std::vector<std::pair<int64_t, clock::time_point>> heard(size_t(o_.nnodes), {-1, clock::now()});
    const auto found = [&](verdict v) {
      std::lock_guard lock(w.mu);
      w.found = std::move(v);
    };
    std::vector<char> gone(size_t(o_.nnodes), 0); // an elastic job's lost nodes
    try {
      while (!w.stop) {
        for (;;) { // this node's lost ranks first: the survivors wait for them
          std::unique_lock lock(pending_mu_);
          if (pending_.empty())
            break;
          change c = std::move(pending_.front());
          lock.unlock();
          publish(c);
          lock.lock();
          pending_.erase(pending_.begin()); // published: flush() may stop waiting
          pending_cv_.notify_all();
        }
        if (o_.node_rank != 0) // node 0's watcher reads the others' heartbeats; nobody reads its
          store_.add(heartbeat_key(o_.node_rank), 1);
        if (const int now = generation(); now > g) {
          // fail() wrote the reason before it moved the generation.
          found({reason(now), now, false});
          return;
        }
        for (int k = 1; o_.node_rank == 0 && k < o_.nnodes; ++k) {
          if (gone[size_t(k)])
            continue;
          const int64_t beats = store_.add(heartbeat_key(k), 0);
          auto& [last, when] = heard[size_t(k)];
          if (beats != last) {
            last = beats;
            when = clock::now();
          } else if (clock::now() - when > o_.rdzv_timeout) {
            const std::string why =
                "node " + std::to_string(k) + "'s launcher has not been heard from for " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - when)
                        .count()) +
                " ms (the launchers' timeout is " + std::to_string(o_.rdzv_timeout.count()) +
                " ms): a cut link, or a launcher stopped or killed";
            if (!o_.elastic) {
              found({why, -1, true});
              return;
            }
            // The side holding the store goes on without that node's ranks; the other side
            // loses the store and stops its own (Note [Elastic membership]).
            gone[size_t(k)] = 1;
            store_.add(kLostNodes, 1);
            change c{{}, {}, why, {}};
            for (int r = k * o_.nproc_per_node; r < (k + 1) * o_.nproc_per_node; ++r)
              c.lost.push_back(r);
            publish(c);
          }
        }
        touch();
        std::unique_lock lock(pending_mu_);
        pending_cv_.wait_for(lock, std::chrono::milliseconds(200),
                             [&] { return !pending_.empty() || w.stop.load(); });
      }
    } catch (const std::exception& e) {
      if (!w.stop)
        found({silent_for() >= o_.rdzv_timeout
                   ? lost_link(e.what())
                   : "node " + std::to_string(o_.node_rank) +
                         " lost the launchers' store (node 0's launcher): " + e.what(),
               -1, true});
    }
  }

  /// The store answered this node just now; silent_for() counts from the last such time.
  void touch() { last_answer_ = std::chrono::steady_clock::now().time_since_epoch().count(); }
  std::chrono::steady_clock::duration silent_for() const {
    return std::chrono::steady_clock::now().time_since_epoch() -
           std::chrono::steady_clock::duration(last_answer_.load());
  }

  const launch_options o_; // a copy: a detached watcher may outlive launch()
  tcp_store store_;
  std::atomic<std::chrono::steady_clock::rep> last_answer_{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  // An elastic job's membership changes to publish, and the lines saying what was published
  // (Note [Elastic membership]); launch()'s thread and the watcher's share them.
  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  std::vector<change> pending_;
  std::vector<std::string> messages_;
  // The current watch: watch(), unwatch() and current() run on launch()'s thread alone; the
  // watcher thread touches only its watch_state.
  std::shared_ptr<watch_state> watch_;
  std::shared_ptr<watch_state> last_watch_; // for wait_unwatched
};

} // namespace

// Note [Elastic membership]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// With --elastic, a rank killed by a signal from outside (SIGKILL, the OOM killer: the process
// of a lost machine; SIGTERM, SIGINT, SIGHUP: an operator or a scheduler) does not stop the
// others. The launcher hosts the ranks' store, as torchrun's agent
// does, so that any rank may die, rank 0 included, and publishes the job's membership in it:
// "/elastic/members/G" lists the RANKs of membership G and "/elastic/generation" is the newest
// G. The survivors' next collective fails (the dead rank's sockets are gone; shared-memory
// all-reduce is off, as it would spin until the timeout) and they regroup as membership G
// (comm/elastic.hpp). A rank that exits with an error, or crashes (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT from a failed assertion or an uncaught exception, SIGSYS, SIGTRAP, SIGPIPE:
// crashed()), still stops the job: a bug in the program is not a lost rank, and healing
// around it would hide it (a TSan run once shrank a job by a rank that died of a signal,
// with no error anywhere). When no rank is left, the
// job fails. With --max-restarts N the launcher starts a replacement for each of the first N
// lost ranks, with the lost rank's RANK and ACTORCH_ELASTIC_JOIN=n (the n-th replacement), and
// publishes the survivors and the replacement together as the next membership: the survivors
// regroup with it at once (the failed step is done again by the whole world) and it takes the
// live state from them, not from a checkpoint (actors/trainer/process_link.cpp). The whole job is
// never restarted: an elastic job that fails ends.
// Across nodes, node 0's launcher hosts the store (Note [Node restarts]) and every launcher
// publishes its own lost ranks there, from its watcher thread (the supervision loop never
// waits on the network), claiming the next membership by compare-and-set. A node whose
// launcher falls silent for the launchers' timeout (a cut link, a lost machine) is counted
// lost by node 0, which publishes the membership without its ranks: the side holding the store
// goes on. The other side's launcher finds the store gone and stops its ranks, saying so. Its
// ranks, and the survivors, may sit in a collective whose packets stopped: each rank's process
// link watches for a newer membership and aborts its group then (Note [Aborting a Gloo
// group]). Ranks wait for a membership after a failed collective for the launchers' timeout
// plus 5 s across nodes (ACTORCH_ELASTIC_WAIT_MS), 30 s on one node.
namespace {

/// Says so on `err` when the master's host does not resolve (a typo, or a cluster's DNS name not
/// up yet): the launchers and ranks go on retrying it until their timeout, as torchrun's do,
/// since on a cluster the name may appear in a moment.
void warn_if_unresolved(const launch_options& o, std::ostream& err) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(o.master_addr.c_str(), nullptr, &hints, &res);
  if (rc == 0) {
    ::freeaddrinfo(res);
    return;
  }
  err << "actorch launch: the master's host '" << o.master_addr << "' does not resolve ("
      << ::gai_strerror(rc) << "); waiting for it up to the timeout ("
      << std::chrono::duration_cast<std::chrono::seconds>(o.rdzv_timeout).count()
      << " s, --rdzv-timeout)" << std::endl;
}

} // namespace

int launch(const launch_options& o, std::ostream& out, std::ostream& err) {
  ACTORCH_CHECK(o.nproc_per_node >= 1, "launch: --nproc-per-node must be >= 1 but got ",
                o.nproc_per_node);
  ACTORCH_CHECK(o.nnodes >= 1, "launch: --nnodes must be >= 1 but got ", o.nnodes);
  ACTORCH_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "launch: --node-rank ", o.node_rank,
                " is outside [0, ", o.nnodes, ")");
  ACTORCH_CHECK(o.master_port >= 0 && o.master_port <= 65535, "launch: --master-port ",
                o.master_port, " is outside [0, 65535]");
  ACTORCH_CHECK(o.max_restarts >= 0, "launch: --max-restarts must be >= 0 but got ",
                o.max_restarts);
  ACTORCH_CHECK(!o.command.empty(), "launch: no program to run");

  launch_options chosen = o;
  std::optional<port_reservation> port; // Note [Reserved ports]: held until the job ends
  if (chosen.master_port == 0 && o.nnodes == 1)
    chosen.master_port = port.emplace().port();
  else if (chosen.master_port == 0)
    chosen.master_port = 29500;
  const std::string token = job_token_for_ranks(chosen);

  g_forward_signal = 0; // before the handler: a signal from now on is forwarded, not lost
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);

  warn_if_unresolved(chosen, err);
  if (sets_omp_threads(o))
    err << "actorch launch: OMP_NUM_THREADS is set to 1 for each rank, as torchrun sets it, so "
           "that the ranks do not oversubscribe the CPUs; set it yourself to tune it"
        << std::endl;
  std::shared_ptr<node_coordinator> nodes;
  if (o.nnodes > 1 || o.elastic)
    nodes = std::make_shared<node_coordinator>(chosen, token);
  lost_rank lost;
  if (o.elastic) // Note [Elastic membership]
    lost = [&, replaced = 0](const child& gone, const std::vector<int>& survivors,
                             const std::string& why) mutable {
      lost_verdict v;
      if (survivors.empty() && o.nnodes == 1)
        return v; // no rank left: the job fails
      v.go_on = true;
      node_coordinator::change c{{gone.rank}, {}, why, {}};
      if (replaced < o.max_restarts) { // its replacement joins the survivors' regrouping
        std::string fork_failure;
        child r = start_rank(chosen, token, 0, gone.rank - o.node_rank * o.nproc_per_node,
                             replaced + 1, fork_failure);
        if (r.pid > 0) {
          ++replaced;
          v.replacement = std::move(r);
          c.replaced.push_back(gone.rank);
          c.replacement =
              "replacement " + std::to_string(replaced) + " of " + std::to_string(o.max_restarts);
        } else {
          c.why += "; no replacement (" + fork_failure + ")";
        }
      }
      nodes->publish_later(std::move(c));
      return v;
    };
  // What an elastic job's watcher published, said on launch()'s thread.
  const auto say_published = [&] {
    if (!nodes)
      return;
    for (const auto& line : nodes->take_messages())
      err << "actorch launch: " << line << "\n";
    err.flush();
  };
  std::string failure;
  for (int restart = 0;;) {
    node_coordinator::verdict seen;       // why the watcher stopped this attempt, if it did
    std::function<std::string()> watched; // one node: nothing to watch
    if (nodes) {
      node_coordinator::watch(nodes, restart);
      watched = [&] {
        say_published();
        return (seen = nodes->current()).reason;
      };
    }
    failure = run_attempt(chosen, token, restart, out, watched, lost);
    if (o.elastic)
      nodes->flush();
    say_published();
    if (nodes) {
      // A store lost after the last look still spares the calls below; a move found after it
      // is left to fail(), which returns the attempt the job moved to, so that a failure of
      // this node's own rank is reported as its own.
      if (const auto late = nodes->current(); seen.reason.empty() && late.lost)
        seen = late;
      nodes->unwatch();
    }
    // A lost store or node: no call that would wait on the network again (Note [Supervision
    // off the network]).
    if (seen.lost)
      break;
    bool finished =
        false; // this node's ranks succeeded, another node's failed (Note [Node restarts])
    bool link_lost = false; // Note [Supervision off the network]: bounded() found it
    if (failure.empty() && nodes && g_interrupted == 0) {
      const auto ended = node_coordinator::bounded<std::pair<int, std::string>>(
          nodes, [restart](node_coordinator& n) {
            const int moved = n.done(restart);
            return std::pair(moved, moved > restart ? n.reason(moved) : std::string());
          });
      if (!ended) {
        failure = nodes->lost_link("this node's ranks had finished; waiting for the others'");
        link_lost = true;
      } else if (ended->first > restart) {
        seen.moved_to = ended->first;
        failure = ended->second;
        finished = true;
      }
    }
    if (link_lost)
      break;
    // A job that ended well or one the user interrupted: done. (A failed last attempt still
    // tells the other nodes, below.)
    // An elastic job replaces lost ranks one by one (Note [Elastic membership]); what ends it
    // is not restarted whole.
    if (failure.empty() || g_interrupted != 0 || o.elastic)
      break;
    const int moved_to = seen.moved_to; // another node's failure moved the job to this attempt
    const bool moved = moved_to > restart;
    int next = restart + 1;
    if (moved) {
      next = moved_to;
    } else if (nodes) {
      const auto after = node_coordinator::bounded<int>(
          nodes, [restart, failure](node_coordinator& n) { return n.fail(restart, failure); });
      if (!after) {
        failure = nodes->lost_link("after this node's rank failed: " + failure);
        break;
      }
      next = *after;
    }
    if (next > o.max_restarts)
      break;
    err << "actorch launch: " << failure
        << (finished ? "; this node's ranks had finished; restarting them with the others"
            : moved  ? "; stopped this node's ranks; restarting them"
                     : "; stopped the other ranks; restarting the job")
        << " (restart " << next << " of " << o.max_restarts << ")\n";
    err.flush();
    restart = next;
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (nodes)
    nodes->wait_unwatched(std::chrono::milliseconds(2000));
  if (failure.empty())
    return 0;
  err << "actorch launch: " << failure << "; stopped the other ranks"
      << (o.max_restarts > 0 && !o.elastic
              ? "; no restarts left (--max-restarts " + std::to_string(o.max_restarts) + ")"
              : std::string())
      << "\n";
  err.flush();
  return 1;
}

void spawn(const std::function<void(int)>& fn, int nprocs, const spawn_options& opts) {
  ACTORCH_CHECK(nprocs >= 1, "spawn: nprocs must be >= 1 but got ", nprocs);
  std::vector<child> kids;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  for (int rank = 0; rank < nprocs; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      die_with_parent(parent);
      int code = 0;
      // Die on SIGTERM from the supervisor whatever handlers the parent installed.
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      set_env("RANK", std::to_string(rank));
      set_env("LOCAL_RANK", std::to_string(rank));
      set_env("WORLD_SIZE", std::to_string(nprocs));
      try {
        fn(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "spawn: rank %d failed: %s\n", rank, e.what());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "spawn: rank %d failed with an unknown exception\n", rank);
        code = 1;
      }
      std::cout.flush();
      std::fflush(nullptr);
      ::_exit(code); // not exit(): the parent's atexit handlers and statics are not ours to run
    }
    if (pid < 0) {
      for (auto& c : kids)
        ::kill(c.pid, SIGKILL);
      for (auto& c : kids)
        reap(c.pid);
      ACTORCH_FAIL("spawn: fork failed for rank ", rank, ": ", std::strerror(errno));
    }
    kids.push_back(child{rank, pid, -1, {}, true});
  }
  const std::string failure = supervise(kids, std::cout, opts.grace, false);
  ACTORCH_CHECK(failure.empty(), "spawn: ", failure, "; stopped the other ranks");
}

} // namespace actorch::dist
