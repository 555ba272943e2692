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
#include "base/child_process.hpp"
#include "base/error.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors {

namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(50);
constexpr int kForeignException = 70;  // the child's exit status for a non-std exception
constexpr int kBadTask = 71;           // ... for a task frame over max_frame_bytes
constexpr int kExecFailed = 72;        // ... when a spawned child's program cannot be started
constexpr size_t kReadChunk = 1 << 20; // a reply's buffer grows by this much as bytes arrive
constexpr uint64_t kAlign = 64;        // tensors' offsets in the shared file

// Frames. ------------------------------------------------------------------------------------

class writer {
public:
  template <class T> void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out.append(s);
  }
  std::string out;
};

class reader {
public:
  explicit reader(std::string_view in) : in_(in) {}
  template <class T> T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    ACTORCH_CHECK(pos_ + sizeof(T) <= in_.size(), "worker process: a truncated frame");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    ACTORCH_CHECK(n <= in_.size() - pos_, "worker process: a truncated frame");
    std::string s(in_.substr(pos_, size_t(n)));
    pos_ += size_t(n);
    return s;
  }
  /// A count of items that take at least one byte each in the frame and `item_bytes` each once
  /// decoded, checked before a vector of them is made (Note [Worker processes]).
  size_t get_count(size_t item_bytes) {
    const uint64_t n = get<uint64_t>();
    const size_t left = in_.size() - pos_;
    ACTORCH_CHECK(n <= left, "worker process: a frame announces ", n, " items with ", left,
                  " bytes left");
    ACTORCH_CHECK(n <= decoded_left_ / item_bytes, "worker process: a frame whose structure ",
                  "takes more than ", worker_process::max_frame_bytes, " bytes once decoded");
    decoded_left_ -= n * item_bytes;
    return size_t(n);
  }
  bool done() const { return pos_ == in_.size(); }

private:
  std::string_view in_;
  size_t pos_ = 0;
  uint64_t decoded_left_ = worker_process::max_frame_bytes;
};

/// Writes exactly n bytes; false if the peer is gone.
bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

/// Sends the frame: its length, then the body.
bool send_frame(int fd, const std::string& body) {
  const uint64_t n = body.size();
  return send_all(fd, reinterpret_cast<const char*>(&n), sizeof n) &&
         send_all(fd, body.data(), body.size());
}

/// Reads exactly n bytes; false at end of file or on an error.
bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

std::string encode_task(const index_batch& t, const std::vector<uint64_t>& released) {
  writer w;
  w.put(t.run_id);
  w.put(t.epoch);
  w.put(t.seq);
  w.put(t.seed);
  w.put<uint8_t>(t.auto_collation);
  w.put<uint64_t>(t.indices.size());
  for (int64_t i : t.indices)
    w.put(i);
  w.put<uint64_t>(t.skip_seeds.size());
  for (uint64_t s : t.skip_seeds)
    w.put(s);
  w.put<uint64_t>(released.size());
  for (uint64_t id : released)
    w.put(id);
  w.put_string(t.keys);
  return std::move(w.out);
}

/// A task, and the leases the parent releases with it (Note [Lent batches]).
index_batch decode_task(std::string_view frame, std::vector<uint64_t>& released) {
  reader r(frame);
  index_batch t;
  t.run_id = r.get<uint64_t>();
  t.epoch = r.get<int64_t>();
  t.seq = r.get<int64_t>();
  t.seed = r.get<uint64_t>();
  t.auto_collation = r.get<uint8_t>() != 0;
  t.indices.resize(r.get_count(sizeof(int64_t)));
  for (auto& i : t.indices)
    i = r.get<int64_t>();
  t.skip_seeds.resize(r.get_count(sizeof(uint64_t)));
  for (auto& s : t.skip_seeds)
    s = r.get<uint64_t>();
  released.resize(r.get_count(sizeof(uint64_t)));
  for (auto& id : released)
    id = r.get<uint64_t>();
  t.keys = r.get_string();
  return t;
}

// The child. ---------------------------------------------------------------------------------

// Note [Collating into the shared file]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The child's buffer pool takes its memory from the shared file itself (shared_file is the
// pool's allocator: it only grows the file, and the pool recycles what it lent), so a batch the
// child collates is already where the parent reads it: encode_sample records its offset and
// copies nothing. Only a reply's other tensors (a collate_fn's own, a sample's tensor passed
// through unbatched) are copied, after the pool's memory, where the next reply's copies go: the
// parent copies those out before it sends the next task. The pool's buffers are lent to the
// parent and come back to the pool only when the parent releases them (Note [Lent batches]).
// The file is mapped
// once over a reserve of address space (kReserve), so the pool's pointers stay valid as it
// grows; a batch beyond the reserve is an error naming the sizes.
class shared_file final : public allocator {
public:
  static constexpr uint64_t kReserve = uint64_t(16) << 30;
  /// `why` says why the file cannot be mapped (empty when it is).
  shared_file(int fd, std::string& why) : fd_(fd) {
    void* p = ::mmap(nullptr, kReserve, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED)
      why = "cannot map the shared batch file: " + errno_str(errno);
    else
      base_ = static_cast<char*>(p);
  }
  ~shared_file() override {
    if (base_ != nullptr)
      ::munmap(base_, kReserve);
  }
  shared_file(const shared_file&) = delete;
  shared_file& operator=(const shared_file&) = delete;

  void* allocate(size_t nbytes) override {
    ACTORCH_CHECK(base_ != nullptr, "the shared batch file is not mapped");
    const uint64_t at = (top_ + kAlign - 1) / kAlign * kAlign;
    const uint64_t end = at + std::max<uint64_t>(nbytes, 1);
    grow(end);
    // Every page of the pool's memory is written once here, so that the file holds written
    // pages up to top_ whatever the batches later leave untouched (the parent checks that a
    // reply's bytes are in written pages: Note [Worker processes]).
    static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    for (uint64_t p = at / page * page; p < end; p += page)
      static_cast<volatile char*>(base_)[std::max(p, at)] = 0;
    top_ = end;
    return base_ + at;
  }
  void deallocate(void*, size_t) noexcept override {} // the pool keeps its buffers to the end
  actorch::device device() const override { return kCPU; }
  std::string_view name() const override { return "shared batch file"; }

  /// A new reply: its copies go after the pool's memory.
  void reset() { used_ = top_; }
  /// The bytes a reply uses from the file's start (the pool's memory and the reply's copies).
  uint64_t used() const { return used_; }
  /// The offset of t's bytes (C order) in the file: where they are, for a contiguous tensor in
  /// the pool's memory (`lent`: the parent may keep them there, Note [Lent batches]); else
  /// copied in after it, for this reply only.
  uint64_t append(const tensor& t, bool& lent) {
    const tensor c = t.contiguous();
    const uint64_t n = c.nbytes();
    const char* p = static_cast<const char*>(c.data_ptr());
    const auto addr = uintptr_t(p), base = uintptr_t(base_);
    lent = n > 0 && base_ != nullptr && addr >= base && addr + n <= base + top_;
    if (lent)
      return uint64_t(addr - base);
    if (n == 0)
      return 0; // nothing to read, anywhere in the file
    const uint64_t at = (used_ + kAlign - 1) / kAlign * kAlign;
    grow(at + n);
    std::memcpy(base_ + at, p, n);
    used_ = at + n;
    return at;
  }

private:
  void grow(uint64_t bytes) {
    if (bytes <= size_)
      return;
    ACTORCH_CHECK(bytes <= kReserve, "a batch needs ", bytes,
                  " bytes of the shared batch file, more than the ", kReserve,
                  " a worker process reserves for it");
    const uint64_t size = std::min(kReserve, std::max<uint64_t>({bytes, 2 * size_, 1 << 20}));
    ACTORCH_CHECK(::ftruncate(fd_, off_t(size)) == 0, "cannot grow the shared batch file to ", size,
                  " bytes: ", errno_str(errno));
    size_ = size;
  }

  int fd_;
  char* base_ = nullptr;
  uint64_t size_ = 0; // the file's
  uint64_t top_ = 0;  // the pool's memory: [0, top_)
  uint64_t used_ = 0; // this reply's: [0, used_)
};

// Note [Custom values across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A custom value (a batch type of the user's own) crosses to the parent as its to_wire gives
// it: the codec's name in the frame, its bytes as a uint8 tensor and its tensors as tensor
// samples, so that all of them go through the shared file and the frame holds only their
// offsets. The parent rebuilds the value by the codec registered under that name in its own
// process (data::register_custom_codec), on the worker's thread; a codec missing or failing
// fails the batch (codec_failed), the child is not to blame. The Python module registers
// one: a Python collate_fn's batch, or any Python object a batch holds, is pickled with its
// tensors and numpy arrays taken out of the pickle (python/src/convert.cpp, Note [Python
// objects across processes]), as torch's workers pickle a batch and put its tensors in shared
// memory. The bytes are the child's, like the rest of the reply: the codec reads them as such.

// A string of at least kStringInFile bytes travels as a uint8 tensor in the shared file, after
// this tag (no sample kind's number), so that only its offset is in the frame: a 100 MiB str in
// a sample passes as bytes of that size do, and many long ones do not add up past the frame's
// bound.
constexpr uint8_t kStringInFileTag = 0xfe;
constexpr size_t kStringInFile = 4096;

// `lent`: set when a tensor stays in the pool's memory for the parent (Note [Lent batches]).
void encode_sample(const data::sample& s, writer& w, shared_file& shm, bool& lent) {
  using kind = data::sample::kind;
  if (s.type() == kind::string && s.as_string().size() >= kStringInFile) {
    const std::string& text = s.as_string();
    w.put<uint8_t>(kStringInFileTag);
    encode_sample(from_blob(const_cast<char*>(text.data()), {int64_t(text.size())}, dtype::uint8,
                            [](void*) {}),
                  w, shm, lent);
    return;
  }
  w.put<uint8_t>(uint8_t(s.type()));
  switch (s.type()) {
  case kind::none: return;
  case kind::tensor: {
    const tensor& t = s.as_tensor();
    ACTORCH_CHECK(t.device().is_cpu(), "a batch tensor on ", t.device(),
                  " cannot leave a worker process (only CPU tensors can)");
    w.put<uint8_t>(uint8_t(t.dtype()));
    w.put<uint64_t>(t.sizes().size());
    for (int64_t d : t.sizes())
      w.put(d);
    bool in_pool = false;
    w.put(shm.append(t, in_pool));
    w.put<uint8_t>(in_pool);
    lent = lent || in_pool;
    return;
  }
  case kind::integer: w.put(s.as_int()); return;
  case kind::floating: w.put(s.as_double()); return;
  case kind::boolean: w.put<uint8_t>(s.as_bool()); return;
  case kind::string: w.put_string(s.as_string()); return;
  case kind::tuple:
    w.put<uint64_t>(s.size());
    for (const auto& item : s.as_tuple())
      encode_sample(item, w, shm, lent);
    return;
  case kind::dict:
    w.put<uint64_t>(s.size());
    for (const auto& [key, item] : s.as_dict()) {
      w.put_string(key);
      encode_sample(item, w, shm, lent);
    }
    return;
  case kind::custom: {
    // Note [Custom values across processes]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // The codec's name, the bytes as a uint8 tensor,
    // then the tensors, each as a tensor sample.
    std::optional<data::custom_wire> wire = s.as_custom()->to_wire();
    ACTORCH_CHECK(wire.has_value(), "a batch holding a ", s.as_custom()->type_name(),
                  " (a type of your own) cannot leave a worker process: use worker threads "
                  "(from Python multiprocessing_context=\"thread\", in C++ "
                  "multiprocessing_context unset), give the type to_wire() and register its "
                  "codec (data::register_custom_codec), or make the batch of tensors, numbers, "
                  "strings, tuples and dicts");
    w.put_string(wire->codec);
    encode_sample(
        from_blob(wire->bytes.data(), {int64_t(wire->bytes.size())}, dtype::uint8, [](void*) {}), w,
        shm, lent);
    w.put<uint64_t>(wire->tensors.size());
    for (const tensor& t : wire->tensors)
      encode_sample(t, w, shm, lent);
    return;
  }
  }
}

// `lease`: the number the parent releases the batch's lent tensors by; `lent` set when any is.
std::string encode_reply(const loaded_batch& b, shared_file& shm, uint64_t lease, bool& lent) {
  shm.reset();
  lent = false;
  writer w;
  w.put(lease);
  w.put(b.run_id);
  w.put(b.seq);
  w.put<uint8_t>(b.end_of_data);
  w.put<uint8_t>(b.collated);
  w.put_string(b.error);
  if (b.error.empty())
    encode_sample(b.data, w, shm, lent);
  w.put(shm.used()); // last: the parent maps this much before it decodes
  return std::move(w.out);
}

} // namespace

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
  if (!send_all(sock, &started, 1))
    ::_exit(0); // the worker is gone
  std::string frame;
  std::unordered_map<uint64_t, data::sample> lent; // Note [Lent batches]: by lease
  std::vector<uint64_t> released;
  uint64_t leases = 0;
  for (uint64_t n = 0; recv_all(sock, reinterpret_cast<char*>(&n), sizeof n);) {
    if (n > worker_process::max_frame_bytes)
      ::_exit(kBadTask); // not a task the worker sent (see Note [Worker processes])
    frame.resize(size_t(n));
    if (!recv_all(sock, frame.data(), frame.size()))
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

std::string worker_process::spawn_frame(const spawn_header& h, const std::string& payload) {
  writer w;
  w.put(h.id);
  w.put(h.num_workers);
  w.put(h.base_seed);
  w.put(h.batch_size);
  w.put<uint8_t>(h.drop_last);
  w.put(h.cpu);
  w.put(h.start_cpu);
  w.put_string(payload);
  return std::move(w.out);
}

std::pair<worker_process::spawn_header, std::string>
worker_process::parse_spawn_frame(std::string_view frame) {
  reader r(frame);
  spawn_header h;
  h.id = r.get<int64_t>();
  h.num_workers = r.get<int64_t>();
  h.base_seed = r.get<uint64_t>();
  h.batch_size = r.get<int64_t>();
  h.drop_last = r.get<uint8_t>() != 0;
  h.cpu = r.get<int32_t>();
  h.start_cpu = r.get<int32_t>();
  std::string payload = r.get_string();
  ACTORCH_CHECK(r.done(), "worker process: a first frame longer than its fields");
  return {h, std::move(payload)};
}

namespace {

// The parent. --------------------------------------------------------------------------------

/// A custom value's codec failed on a reply that parsed (none registered under its name, or it
/// threw): the batch's error, not a child out of step (Note [Custom values across processes]).
struct codec_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A lent tensor (Note [Lent batches]) becomes a view of the parent's mapping that holds `lease`
// (null: copied into `pool`, or new memory, as every other tensor is).
data::sample decode_sample(reader& r, char* base, uint64_t bytes, data::buffer_pool* pool,
                           const std::shared_ptr<void>& lease, int depth) {
  using kind = data::sample::kind;
  ACTORCH_CHECK(depth < 64, "worker process: a batch nested deeper than 64");
  const uint8_t tag = r.get<uint8_t>();
  if (tag == kStringInFileTag) {
    const data::sample raw = decode_sample(r, base, bytes, nullptr, nullptr, depth + 1);
    ACTORCH_CHECK(raw.is_tensor() && raw.as_tensor().dtype() == dtype::uint8 &&
                      raw.as_tensor().dim() == 1,
                  "worker process: a long string's bytes are not a uint8 vector");
    const tensor& b = raw.as_tensor();
    return std::string(static_cast<const char*>(b.data_ptr()), size_t(b.numel()));
  }
  const auto k = kind(tag);
  switch (k) {
  case kind::none: return {};
  case kind::tensor: {
    const uint8_t code = r.get<uint8_t>();
    ACTORCH_CHECK(code < num_dtypes, "worker process: unknown dtype ", int(code));
    const auto dt = dtype(code);
    const uint64_t ndim = r.get<uint64_t>();
    ACTORCH_CHECK(ndim <= 64, "worker process: a tensor of ", ndim, " dims");
    shape_t shape(static_cast<size_t>(ndim));
    uint64_t n = element_size(dt);
    for (auto& d : shape) {
      d = r.get<int64_t>();
      ACTORCH_CHECK(d >= 0 && !__builtin_mul_overflow(n, uint64_t(d), &n),
                    "worker process: a bad shape");
    }
    const uint64_t at = r.get<uint64_t>();
    const bool lent = r.get<uint8_t>() != 0;
    ACTORCH_CHECK(at <= bytes && n <= bytes - at,
                  "worker process: a tensor outside the shared file");
    ACTORCH_CHECK(at % element_size(dt) == 0, "worker process: a tensor at offset ", at,
                  ", not aligned to its ", element_size(dt), "-byte elements");
    if (lent && lease != nullptr)
      return from_blob(base + at, shape, dt, [lease](void*) {});
    tensor t = pool ? pool->empty(shape, dt) : empty(shape, {.dtype = dt});
    if (n > 0)
      std::memcpy(t.data_ptr(), base + at, n);
    return t;
  }
  case kind::integer: return r.get<int64_t>();
  case kind::floating: return r.get<double>();
  case kind::boolean: return r.get<uint8_t>() != 0;
  case kind::string: return r.get_string();
  case kind::tuple: {
    data::sample::tuple items(r.get_count(sizeof(data::sample)));
    for (auto& item : items)
      item = decode_sample(r, base, bytes, pool, lease, depth + 1);
    return items;
  }
  case kind::dict: {
    data::sample::dict items(r.get_count(sizeof(data::sample::dict::value_type)));
    for (auto& [key, item] : items) {
      key = r.get_string();
      item = decode_sample(r, base, bytes, pool, lease, depth + 1);
    }
    return items;
  }
  case kind::custom: { // Note [Custom values across processes]
    data::custom_wire wire;
    wire.codec = r.get_string();
    const data::sample raw = decode_sample(r, base, bytes, pool, lease, depth + 1);
    ACTORCH_CHECK(raw.is_tensor() && raw.as_tensor().dtype() == dtype::uint8 &&
                      raw.as_tensor().dim() == 1,
                  "worker process: a custom value's bytes are not a uint8 vector");
    const tensor& b = raw.as_tensor();
    wire.bytes.assign(static_cast<const char*>(b.data_ptr()), size_t(b.numel()));
    wire.tensors.resize(r.get_count(sizeof(tensor)));
    for (tensor& t : wire.tensors) {
      data::sample item = decode_sample(r, base, bytes, pool, lease, depth + 1);
      ACTORCH_CHECK(item.is_tensor(), "worker process: a custom value's tensor is a ",
                    data::kind_name(item.type()));
      t = item.as_tensor();
    }
    try {
      return data::custom_from_wire(std::move(wire));
    } catch (const std::exception& e) {
      throw codec_failed(e.what());
    }
  }
  }
  ACTORCH_FAIL("worker process: unknown sample kind ", int(k));
}

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
