// A dataset worker's loads in a forked child process (loader_options::multiprocessing_context =
// "fork"), for datasets that cannot be trusted: a crash (abort, a segfault) or a hang in user code
// kills the child, not the program. The worker actor stays in the loader's process and hands
// each task to its child over a socket; the child loads and collates the batch as a worker thread
// would, writes the tensors' bytes into a shared-memory file, and answers with the batch's
// structure; the worker copies the batch out into the loader's buffer pool (pinned when
// pin_memory). See Note [Worker processes] in worker_process.cpp.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "actors/messages.hpp"
#include "core/allocator.hpp"
#include "core/data/buffer_pool.hpp"
#include "core/data/worker_info.hpp"

namespace actorch::actors {

/// Thrown by worker_process::load when the child died or passed its deadline (and was killed).
/// Not a std::exception, so that nothing on the way catches it as a dataset error: it ends the
/// worker actor, whose supervisor replaces it and loads the batch again (Note [Worker death]);
/// a deadline passed without retry_timeouts names its batch, which fails instead.
struct worker_process_died {
  std::string message;
  int64_t timed_out_seq = -1;
};

class worker_process {
public:
  /// What the child does for one task (load_one on its copy of the worker's state).
  using load_fn = std::function<loaded_batch(const index_batch&)>;
  /// What the child does first (pinning, worker_init_fn; a non-empty result is an error
  /// reported with the first batch), told where to collate its batches: memory in the shared
  /// file (Note [Collating into the shared file]).
  using init_fn = std::function<std::string(allocator* batches)>;

  /// The most bytes a frame between the worker and its child may hold, either way: a task (8
  /// bytes per sample index, so up to about 8 million in a batch) or a reply (the batch's
  /// structure and strings; the tensors' bytes go through the shared file). The parent refuses a
  /// reply announced longer before allocating for it, and kills the child (Note [Worker
  /// processes] in worker_process.cpp says what else is bounded).
  static constexpr uint64_t max_frame_bytes = uint64_t(64) << 20;

  /// Forks the child, which first runs `init` (pinning, worker_init_fn; a non-empty result is an
  /// error reported with the first batch) and then answers each task with `load`. The batches
  /// come back into `pool` (nullptr: plain memory), marked pinned when `pin_memory`. A load that
  /// passes `timeout_s` (> 0) is killed. `name` ("DataLoader worker 1") starts every message.
  /// `hooks` run around the fork (hooks.child in the child, before `init`). A load still running
  /// after `report_delay_s` (> 0) is reported on stderr once, the child asked for its stack
  /// with `stack_signal` when not 0.
  /// @throws actorch::error when the child cannot be started.
  /// With `spawn` (non-empty argv) the child is a new program instead, which gets `first`
  /// (spawn_frame) before its first task and then serves tasks itself (Note [Spawned
  /// workers]); `init`, `load` and `hooks` are then unused.
  worker_process(std::string name, init_fn init, load_fn load, data::buffer_pool* pool,
                 bool pin_memory, double timeout_s, bool retry_timeouts,
                 const std::atomic<uint64_t>* active_run_id, const data::fork_hooks& hooks = {},
                 double report_delay_s = 0, int stack_signal = 0,
                 const data::spawn_command& spawn = {}, std::string first = {});
  /// Kills and reaps the child.
  ~worker_process();
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  /// Loads `task` in the child. @throws worker_process_died naming the worker, its process, the
  /// batch and how it ended: a signal, an exit, or killed on the deadline, on a reply announced
  /// longer than max_frame_bytes or on one that cannot be taken. A task longer than
  /// max_frame_bytes is a batch error in the result (the child never sees it).
  loaded_batch load(const index_batch& task);

  pid_t pid() const { return pid_; }

  /// What a spawned child is told first: its worker's numbers, then the spawn payload.
  struct spawn_header {
    int64_t id = 0, num_workers = 1;
    uint64_t base_seed = 0;
    int64_t batch_size = 1;
    bool drop_last = false;
    int32_t cpu = -1, start_cpu = -1;
  };
  static std::string spawn_frame(const spawn_header& h, const std::string& payload);
  /// The inverse of spawn_frame. @throws actorch::error on a frame that does not parse.
  static std::pair<spawn_header, std::string> parse_spawn_frame(std::string_view frame);
  /// The child's side: runs `init`, then answers every task on `sock` with `load`, writing the
  /// batches into `shm_fd`, until the worker closes the socket; then exits the process. A forked
  /// child runs it at once, a spawned program after reading its first frame.
  [[noreturn]] static void serve(int sock, int shm_fd, pid_t parent, const std::string& name,
                                 const init_fn& init, const load_fn& load);

private:
  using clock = std::chrono::steady_clock;
  enum class wait_result { ready, died, shutdown, expired };
  /// Waits until the socket is ready for `events`, the child ends (its wait status in
  /// exit_status_), the loader shuts down, or `deadline` passes.
  wait_result wait_for(short events, clock::time_point deadline);
  /// Sends (out) or receives n bytes; false if the loader shut down meanwhile. Throws
  /// worker_process_died when the child ends or passes the deadline (killed then).
  bool transfer(bool out, char* p, size_t n, clock::time_point deadline, const index_batch& task);
  [[noreturn]] void died(const index_batch& task, const std::string& how);
  /// Kills and reaps the child, then died(task, how + " and was killed").
  [[noreturn]] void kill_child(const index_batch& task, const std::string& how);
  /// `task` passed the deadline: kill_child, with retry_timeouts; else kills and reaps the child
  /// and throws worker_process_died naming the batch, with PyTorch's timeout words first.
  [[noreturn]] void timed_out(const index_batch& task);
  /// What the child does with `task`, for messages: loading it, or still starting before it.
  std::string doing(const index_batch& task) const;
  /// Maps the shared file, after checking that the child wrote the `bytes` its reply used.
  void map_shared(uint64_t bytes);

  std::string name_;
  data::buffer_pool* pool_;
  bool pin_memory_;
  double timeout_s_;
  bool retry_timeouts_;
  double report_delay_s_;
  int stack_signal_;
  const index_batch* task_ = nullptr; // the load in progress, for its report
  clock::time_point task_began_{};
  bool reported_ = false;
  bool started_ = false; // the child said it started (Note [Worker start])
  /// Reports the load in progress once it has run past report_delay_s_.
  void report_if_slow();
  const std::atomic<uint64_t>* active_run_id_;
  pid_t pid_ = -1;
  int sock_ = -1;   // our end of the socket pair
  int shm_fd_ = -1; // the shared-memory file the child writes batches into
  int pidfd_ = -1;  // readable once the child ends (-1 where the kernel has no pidfd_open)
  int exit_status_ = 0;
  struct mapping;  // the shared file mapped here, up to its size then
  struct released; // leases given back by the batches' last views (Note [Lent batches])
  struct lease;
  std::shared_ptr<mapping> map_;
  std::shared_ptr<released> released_;
  std::string first_; // a spawned child's first frame, sent with the first task
};

} // namespace actorch::actors
