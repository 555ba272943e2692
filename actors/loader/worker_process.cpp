// The worker process (worker_process.hpp).
//
// Note [Worker processes]
// ~~~~~~~~~~~~~~~~~~~~~~~
// With multiprocessing_context = "fork", each dataset worker actor forks one child process on its
// first task, from its own thread, after which the child holds a copy of everything the worker
// had: the dataset, collate_fn, worker_init_fn, the worker's state. The child runs
// worker_init_fn with get_worker_info() set, as PyTorch's worker processes do, then serves tasks:
//   parent -> child: a task (run id, epoch, batch, seed, indices; an iterable's skip seeds;
//                    the leases released; a keyed dataset's keys for the indices)
//   child -> parent: the batch's structure (tuples, dicts, numbers, strings; for each tensor its
//                    dtype, shape and offset) or the error, the tensors' bytes being in a
//                    shared-memory file (memfd) the child grows as needed and the parent maps
// framed by a 64-bit length over a socket pair. The child loads and collates with the code the
// worker threads use (load_one in worker.cpp) but into a buffer pool of its own, whose memory is
// the shared file (Note [Collating into the shared file]): the loader's pool, its mutex and its
// pinned pages are the parent's. The parent hands each batch out where it lies in the shared
// file, the child keeping its buffers until the batch's last view is gone (Note [Lent
// batches]); with pin_memory it copies the batch into the pool's pinned memory instead.
//
// The child can die or hang without taking the program with it:
// - it dies (abort, a segfault, an exception not derived from std::exception, _exit): the
//   parent learns it from a pidfd (the socket cannot tell: a child forked later by another
//   worker holds a copy of its end), reaps it and says how it ended, on stderr and in the
//   worker_process_died it throws; that ends the worker actor, whose supervisor spawns a new
//   worker (a new child) and loads the batch again, up to max_attempts (Note [Worker death]);
// - a load passes `timeout`: the parent kills the child (SIGKILL); the batch fails with PyTorch's
//   timeout error (timed_out), or with retry_timeouts it goes on as for a death. The deadline is
//   kept here, from when the child got the task, and not by the coordinator, whose timeout
//   could not kill the child.
// A dataset exception (a std::exception) is an ordinary error, reported as a worker thread's.
// The child's fatal signals go back to their default action, so a fault ends it at once (see
// serve). The child dies with the worker's thread (PR_SET_PDEATHSIG), so a killed loader
// leaves no child behind; the worker's state kills and reaps it when the worker stops. Writing
// to a child that died is send(MSG_NOSIGNAL): no SIGPIPE reaches the program. The loader's
// shutdown (active_run_id set to its end) interrupts the wait for a child within kPollSlice.
// fork() copies only the calling thread: a lock another thread held at that moment stays held
// in the child. The child therefore touches only the dataset, collate and the allocator
// (malloc is fork-safe in glibc; GCC 12's AddressSanitizer allocator is not), never CAF or the
// buffer pool; a dataset that takes a lock of its own that another thread may hold should use
// worker_init_fn to re-create it. A child stuck on such a lock is a hang like any other: with
// a timeout it is killed and replaced.
//
// Every frame is bounded before anything is allocated for it. The child runs the very code this
// mode exists to contain, and that code can write on the socket too (or find the shared file), so
// nothing the child says is trusted to size an allocation:
// - a reply announced longer than max_frame_bytes (64 MiB: the batch's structure and short
//   strings; the tensors' and long strings' bytes go through the shared file) is refused at its
//   length, and the child is killed, which ends the worker as a death does (replaced, the batch
//   loaded again). Under the bound the parent's buffer grows with the bytes that arrive, so a
//   length that lies costs nothing;
// - a count inside a frame (a tuple's or dict's items, a task's indices) is checked against the
//   bytes left in the frame, and what the decoded structure takes against max_frame_bytes,
//   before its vector is made (reader::get_count);
// - the shared file must hold, in pages the child wrote, the bytes the reply says it used: a file
//   grown with ftruncate alone costs the child nothing but would cost the parent the copy;
// - a reply that breaks any of these, or does not parse, kills the child as a death does, the
//   message saying what was wrong.
// The child likewise ends (kBadTask) on a task frame over the bound; the parent sends none: load
// fails such a batch as a batch error first.
//
// Note [Spawned workers]
// ~~~~~~~~~~~~~~~~~~~~~~
// With multiprocessing_context = "spawn" the child is a new program (loader_options::spawn;
// from Python, an interpreter running actorch.data._spawn): the worker forks, and the child at
// once puts the socket and the shared file on descriptors 3 and 4 (dup2, async-signal-safe: the
// parent has other threads), asks to die with the worker's thread and execs it. Nothing of
// the parent's memory survives the exec, so the child learns what it is from its first frame
// (spawn_frame: the worker's id, worker count, base seed, batch size, drop_last and CPUs, then
// the payload: for Python, the pickled dataset, collate_fn and worker_init_fn), which the worker
// sends just before its first task, under that task's deadline. The program rebuilds the
// worker from it and runs serve(), the loop a forked child runs; from then on the two are the
// same to the worker: the same frames, deaths, timeouts and replacement. A program that cannot
// start (exec fails) exits with kExecFailed, reported with the batch as any death is; one that
// cannot rebuild the dataset (an unpickling error) reports it as worker_init_fn's failure is,
// with the first batch.
#include "actors/loader/worker_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/loader/plan.hpp"
#include "actors/loader/shared_batch_file.hpp"
#include "actors/loader/worker_wire.hpp"
#include "base/child_process.hpp"
#include "base/error.hpp"
#include "base/fd_io.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors {

namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(50);
constexpr int kForeignException = 70;  // the child's exit status for a non-std exception
constexpr int kBadTask = 71;           // ... for a task frame over max_frame_bytes
constexpr int kExecFailed = 72;        // ... when a spawned child's program cannot be started
constexpr size_t kReadChunk = 1 << 20; // a reply's buffer grows by this much as bytes arrive

using wire::codec_failed;
using wire::decode_sample;
using wire::decode_task;
using wire::encode_reply;
using wire::encode_task;
using wire::reader;
using wire::send_frame;

} // namespace

// The child. ---------------------------------------------------------------------------------

void worker_process::serve(int sock, int shm_fd, pid_t parent, const std::string& name,
                           const init_fn& init, const load_fn& load) {
  die_with_parent(parent); // Note [Worker processes]: the child dies with the worker's thread

  // A fault kills the child at once: a handler the program installed (a crash reporter, a test
  // framework's) would run in a copy of a multithreaded process, where a lock it needs may be
  // held for ever by a thread that was not copied.
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS})
    ::signal(sig, SIG_DFL);
  std::string init_error;
  shared_file shm(shm_fd, init_error); // Note [Collating into the shared file]
  try {
    if (init_error.empty())
      init_error = init(&shm);
    else
      init_error = name + ": " + init_error;
  } catch (const std::exception& e) {
    init_error = name + ": " + e.what();
  } catch (...) {
    ::_exit(kForeignException);
  }
  // Started (worker_init_fn returned): one byte the parent reads before its first task, so that
  // a child stuck before it is named as starting, not as loading that task (Note [Worker start]).
  const char started = 0;
  if (send_all(sock, &started, 1) != io_result::done)
    ::_exit(0); // the worker is gone
  std::string frame;
  std::unordered_map<uint64_t, data::sample> lent; // Note [Lent batches]: by lease
  std::vector<uint64_t> released;
  uint64_t leases = 0;
  for (uint64_t n = 0; recv_all(sock, reinterpret_cast<char*>(&n), sizeof n) == io_result::done;) {
    if (n > worker_process::max_frame_bytes)
      ::_exit(kBadTask); // not a task the worker sent (see Note [Worker processes])
    frame.resize(size_t(n));
    if (recv_all(sock, frame.data(), frame.size()) != io_result::done)
      break;
    loaded_batch out;
    try {
      const index_batch task = decode_task(frame, released);
      for (const uint64_t id : released)
        lent.erase(id); // their buffers go back to the pool, for this task's batch
      out.run_id = task.run_id;
      out.seq = task.seq;
      if (init_error.empty())
        out = load(task);
      else
        out.error = init_error;
    } catch (const std::exception& e) {
      out.error = name + ": " + e.what();
    } catch (...) {
      ::_exit(kForeignException); // a worker thread would die of it: so does the child
    }
    std::string reply;
    bool lends = false;
    const uint64_t lease = ++leases;
    try {
      reply = encode_reply(out, shm, lease, lends);
    } catch (const std::exception& e) {
      loaded_batch failed;
      failed.run_id = out.run_id;
      failed.seq = out.seq;
      failed.error = name + ": cannot hand batch " + std::to_string(out.seq) +
                     " to the loader's process: " + e.what();
      reply = encode_reply(failed, shm, lease, lends);
    }
    if (lends)
      lent.emplace(lease, std::move(out.data));
    if (!send_frame(sock, reply))
      ::_exit(0); // the worker is gone
  }
  ::_exit(0); // the worker closed the socket: it is stopping
}

namespace {

// The parent. --------------------------------------------------------------------------------

std::string exit_text(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == kForeignException)
    return "ended on an exception not derived from std::exception";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExecFailed)
    return "could not start its program (exec failed)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kBadTask)
    return "ended on a task frame longer than " + std::to_string(worker_process::max_frame_bytes) +
           " bytes";
  return describe_wait_status(status);
}

} // namespace

// Note [Lent batches]
// ~~~~~~~~~~~~~~~~~~~
// A batch a child collated into its pool's memory (Note [Collating into the shared file]) is
// handed to the user where it is, as torch hands out its workers' shared-memory tensors: the
// parent's tensors are views of its mapping of the shared file, and no byte is copied. So the
// child must not collate into those buffers again while any view lives: its reply names a lease
// and the child keeps the batch's tensors (and so their buffers, out of its pool) under it. When
// the last view of a batch is gone, in whichever thread drops it, its lease goes on the
// worker's `released` list, which the next task to that child carries; the child drops the
// batches named there, before it loads, and their buffers serve that task's batch. A user who
// holds every batch makes the child's pool, and the file, grow as torch's shared memory would.
// The views hold the mapping they point into: when the file grows the parent maps it anew, and
// an old mapping lives on with its last view, as it does when the child dies or the loader
// ends (the memfd lives while mapped). The file is sealed against shrinking (F_SEAL_SHRINK)
// before the child exists, so nothing the child runs can pull pages from under a view. Tensors
// the child copied in after the pool's memory (a collate_fn's own, a sample's tensor passed
// through) are still copied out, and with pin_memory every batch is (into pinned memory).
struct worker_process::mapping {
  char* base;
  uint64_t bytes;
  mapping(char* b, uint64_t n) : base(b), bytes(n) {}
  ~mapping() { ::munmap(base, bytes); }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
};

struct worker_process::released {
  std::mutex mu;
  std::vector<uint64_t> ids;
};

struct worker_process::lease {
  std::shared_ptr<mapping> map; // the views' memory
  std::shared_ptr<released> to;
  uint64_t id;
  lease(std::shared_ptr<mapping> m, std::shared_ptr<released> r, uint64_t i)
      : map(std::move(m)), to(std::move(r)), id(i) {}
  ~lease() {
    std::lock_guard lock(to->mu);
    to->ids.push_back(id);
  }
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
};

worker_process::worker_process(std::string name, init_fn init, load_fn load,
                               data::buffer_pool* pool, bool pin_memory, double timeout_s,
                               bool retry_timeouts, const std::atomic<uint64_t>* active_run_id,
                               const data::fork_hooks& hooks, double report_delay_s,
                               int stack_signal, const data::spawn_command& spawn,
                               std::string first)
    : name_(std::move(name)), pool_(pool), pin_memory_(pin_memory), timeout_s_(timeout_s),
      retry_timeouts_(retry_timeouts), report_delay_s_(report_delay_s), stack_signal_(stack_signal),
      active_run_id_(active_run_id), released_(std::make_shared<released>()),
      first_(std::move(first)) {
  int fds[2];
  ACTORCH_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, name_,
                ": cannot make the socket to its process: ", errno_str(errno));
  shm_fd_ = ::memfd_create(("actorch " + name_).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (shm_fd_ < 0 || ::fcntl(shm_fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) { // Note [Lent batches]
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    if (shm_fd_ >= 0)
      ::close(shm_fd_);
    ACTORCH_FAIL(name_, ": cannot make its shared batch file: ", errno_str(err));
  }
  const pid_t parent = ::getpid();
  if (!spawn.argv.empty()) { // Note [Spawned workers]: argv made here, the child only execs
    std::vector<char*> argv = exec_args(spawn.argv);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int sock = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
      const int file = ::fcntl(shm_fd_, F_DUPFD_CLOEXEC, 10);
      if (sock < 0 || file < 0 || ::dup2(sock, 3) < 0 || ::dup2(file, 4) < 0)
        ::_exit(kExecFailed);
      die_with_parent(parent);
      ::execv(argv[0], argv.data());
      ::_exit(kExecFailed);
    }
  } else {
    if (hooks.before)
      hooks.before();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      if (hooks.child)
        hooks.child();
      serve(fds[1], shm_fd_, parent, name_, init, load);
    }
  }
  const int err = errno;
  if (spawn.argv.empty() && hooks.parent)
    hooks.parent();
  ::close(fds[1]);
  sock_ = fds[0];
  ACTORCH_CHECK(pid_ > 0, name_, ": cannot fork its process: ", errno_str(err));
  // Wakes wait_for when the child ends; without it (Linux before 5.3) a slice of polling does.
  pidfd_ = int(::syscall(SYS_pidfd_open, pid_, 0));
}

worker_process::~worker_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    reap(pid_);
  }
  for (const int fd : {shm_fd_, sock_, pidfd_})
    if (fd >= 0)
      ::close(fd);
}

// Note [Worker start]
// ~~~~~~~~~~~~~~~~~~~
// The child starts (worker_init_fn, and a spawned one rebuilds its dataset first) before it
// reads any task, and says so with one byte, which the parent reads before it sends the first
// task. Until then a report, a death or a timeout names the child as starting, ahead of the
// batch it was given; the deadline counts the start, as PyTorch's timeout does.
std::string worker_process::doing(const index_batch& task) const {
  const std::string batch =
      "batch " + std::to_string(task.seq) + " (sample indices " + indices_str(task.indices) + ")";
  return started_ ? "loading " + batch
                  : "starting (worker_init_fn had not returned; a spawned worker rebuilds its "
                    "dataset first), before " +
                        batch;
}

void worker_process::died(const index_batch& task, const std::string& how) {
  const std::string message =
      name_ + " (process " + std::to_string(pid_) + ") " + how + " while " + doing(task);
  std::fprintf(stderr, "%s; the worker is replaced and the batch loaded again\n", message.c_str());
  pid_ = -1; // reaped
  throw worker_process_died{message};
}

void worker_process::kill_child(const index_batch& task, const std::string& how) {
  ::kill(pid_, SIGKILL);
  reap(pid_);
  died(task, how + " and was killed");
}

void worker_process::timed_out(const index_batch& task) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", timeout_s_);
  if (retry_timeouts_)
    kill_child(task, std::string("did not finish within the timeout of ") + secs + " seconds");
  const pid_t pid = pid_;
  ::kill(pid_, SIGKILL);
  reap(pid_);
  pid_ = -1;
  // PyTorch's words first (users' retry logic and alerts match them), then which worker.
  throw worker_process_died{std::string("DataLoader timed out after ") + secs +
                                " seconds: " + name_ + " (process " + std::to_string(pid) +
                                ") was still " + doing(task) + " and was killed",
                            task.seq};
}

void worker_process::map_shared(uint64_t bytes) {
  struct stat st {};
  ACTORCH_CHECK(::fstat(shm_fd_, &st) == 0,
                "cannot stat the shared batch file: ", errno_str(errno));
  ACTORCH_CHECK(uint64_t(st.st_size) >= bytes, "the shared batch file holds ", st.st_size,
                " bytes, fewer than the ", bytes, " the reply says it used");
  // Pages the child wrote, not a size it set: see Note [Worker processes]. Every page up to
  // `bytes` holds some tensor's bytes (they follow each other, 64-byte aligned).
  ACTORCH_CHECK(uint64_t(st.st_blocks) * 512 >= bytes, "the shared batch file has ",
                uint64_t(st.st_blocks) * 512, " bytes written, fewer than the ", bytes,
                " the reply says it used");
  if (map_ != nullptr ? bytes <= map_->bytes : bytes == 0)
    return; // (an empty file cannot be mapped, and a reply using none has nothing there)
  // A new mapping of the grown file; batches lent from the old one keep it (Note [Lent
  // batches]). Writable: a batch is the user's, to change in place as torch's are.
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd_, 0);
  ACTORCH_CHECK(p != MAP_FAILED, name_, ": cannot map its shared batch file: ", errno_str(errno));
  map_ = std::make_shared<mapping>(static_cast<char*>(p), uint64_t(st.st_size));
}

worker_process::wait_result worker_process::wait_for(short events, clock::time_point deadline) {
  for (;;) {
    pollfd p[2] = {{sock_, events, 0}, {pidfd_, POLLIN, 0}};
    const int r = ::poll(p, pidfd_ >= 0 ? 2 : 1, int(kPollSlice.count()));
    if (r < 0 && errno != EINTR)
      ACTORCH_FAIL(name_, ": waiting for its process failed: ", errno_str(errno));
    if (r > 0 && (p[0].revents & (events | POLLHUP | POLLERR)) != 0)
      return wait_result::ready;
    // The socket alone cannot tell: a child forked since by another worker may hold a copy of
    // the dead child's end. So the child itself is asked (pidfd wakes us when it ends).
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      return wait_result::died;
    }
    if (active_run_id_ && active_run_id_->load() == ~uint64_t(0))
      return wait_result::shutdown;
    if (clock::now() >= deadline)
      return wait_result::expired;
    report_if_slow();
  }
}

void worker_process::report_if_slow() {
  if (reported_ || task_ == nullptr || report_delay_s_ <= 0)
    return;
  const double secs = std::chrono::duration<double>(clock::now() - task_began_).count();
  if (secs < report_delay_s_)
    return;
  reported_ = true;
  std::fprintf(stderr, "%s (process %d) has been %s for %.1f s%s\n", name_.c_str(), int(pid_),
               doing(*task_).c_str(), secs, stack_signal_ != 0 ? "; its stack follows" : "");
  std::fflush(stderr);
  if (stack_signal_ != 0)
    ::kill(pid_, stack_signal_);
}

bool worker_process::transfer(bool out, char* p, size_t n, clock::time_point deadline,
                              const index_batch& task) {
  while (n > 0) {
    switch (wait_for(out ? POLLOUT : POLLIN, deadline)) {
    case wait_result::ready: break;
    case wait_result::died: died(task, exit_text(exit_status_));
    case wait_result::shutdown: return false;
    case wait_result::expired: timed_out(task);
    }
    const ssize_t r =
        out ? ::send(sock_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : ::recv(sock_, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (r <= 0) // the child closed its end: it is ending
      died(task, exit_text(reap(pid_)));
    p += r;
    n -= size_t(r);
  }
  return true;
}

loaded_batch worker_process::load(const index_batch& task) {
  // The deadline counts from now, when the child gets the task (Note [Worker processes]).
  const auto deadline =
      clock::now() + std::chrono::duration_cast<clock::duration>(
                         std::chrono::duration<double>(timeout_s_ > 0 ? timeout_s_ : 1e9));
  task_ = &task; // See report_if_slow
  task_began_ = clock::now();
  reported_ = false;
  struct done_with_task {
    const index_batch*& t;
    ~done_with_task() { t = nullptr; }
  } done{task_};
  loaded_batch out;
  out.run_id = task.run_id;
  out.seq = task.seq;
  out.error = "cancelled"; // the loader shuts down meanwhile: the destructor kills the child
  std::vector<uint64_t> given_back;
  {
    std::lock_guard lock(released_->mu);
    given_back.swap(released_->ids);
  }
  std::string frame = encode_task(task, given_back);
  if (frame.size() > max_frame_bytes) { // a batch error: see Note [Worker processes]
    out.error = name_ + ": batch " + std::to_string(task.seq) + " is a task of " +
                std::to_string(frame.size()) + " bytes (" + std::to_string(task.indices.size()) +
                " sample indices), more than the " + std::to_string(max_frame_bytes) +
                " a frame to a worker process may hold";
    return out;
  }
  if (!first_.empty()) { // a spawned child's first frame (Note [Spawned workers])
    uint64_t len = first_.size();
    if (!transfer(true, reinterpret_cast<char*>(&len), sizeof len, deadline, task) ||
        !transfer(true, first_.data(), first_.size(), deadline, task))
      return out;
    first_.clear();
    first_.shrink_to_fit();
  }
  if (!started_) { // Note [Worker start]
    char started = 0;
    if (!transfer(false, &started, 1, deadline, task))
      return out;
    started_ = true;
  }
  uint64_t n = frame.size();
  if (!transfer(true, reinterpret_cast<char*>(&n), sizeof n, deadline, task) ||
      !transfer(true, frame.data(), frame.size(), deadline, task) ||
      !transfer(false, reinterpret_cast<char*>(&n), sizeof n, deadline, task))
    return out;
  // The length is the child's word: checked before anything is allocated for it, and the buffer
  // grows only with the bytes that arrive (Note [Worker processes]).
  if (n > max_frame_bytes)
    kill_child(task, "announced a reply of " + std::to_string(n) + " bytes, more than the " +
                         std::to_string(max_frame_bytes) + " a reply may hold,");
  frame.clear();
  while (frame.size() < n) {
    const size_t at = frame.size();
    frame.resize(at + size_t(std::min<uint64_t>(n - at, kReadChunk)));
    if (!transfer(false, frame.data() + at, frame.size() - at, deadline, task))
      return out;
  }
  try {
    // The shared file's size used is the frame's last 8 bytes.
    ACTORCH_CHECK(frame.size() >= sizeof(uint64_t), "a truncated reply");
    uint64_t used = 0;
    std::memcpy(&used, frame.data() + frame.size() - sizeof used, sizeof used);
    map_shared(used);
    reader r(std::string_view(frame).substr(0, frame.size() - sizeof used));
    const uint64_t lease_id = r.get<uint64_t>();
    out.run_id = r.get<uint64_t>();
    out.seq = r.get<int64_t>();
    out.end_of_data = r.get<uint8_t>() != 0;
    out.collated = r.get<uint8_t>() != 0;
    out.error = r.get_string();
    if (out.error.empty()) {
      // Pinned batches are copied into the pool's pinned memory; others are lent.
      const bool copy = pin_memory_ && pool_ != nullptr;
      std::shared_ptr<void> held;
      if (!copy)
        held = std::make_shared<lease>(map_, released_, lease_id);
      out.data = decode_sample(r, map_ ? map_->base : nullptr, used, pool_, held, 0);
      out.pinned = copy;
    }
    ACTORCH_CHECK(r.done(), "a reply longer than its batch");
  } catch (const codec_failed& e) {
    out.data = {};
    out.error = e.what();
  } catch (const actorch::error& e) {
    // The child is out of step with us, or lies: it goes as a death does.
    kill_child(task, std::string("sent a reply that cannot be taken (") + e.what() + "),");
  }
  return out;
}

} // namespace actorch::actors
