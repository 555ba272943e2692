// process_group_nccl: NCCL collectives on CUDA tensors (CUDA builds only; see
// process_group_nccl.hpp). Tensors must be contiguous CUDA tensors on the group's device. What
// NCCL cannot express is refused clearly: recv from any rank, BAND/BOR/BXOR.
//
// Note [NCCL stream order]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// As in PyTorch, an op is queued from the caller's thread, in issue order (under the group's
// lock), on the group's own stream, which first waits for an event recorded on the caller's
// current stream: the collective reads what the kernels queued before it wrote (backward's
// gradients) and the host does not wait. An event recorded after the op marks its end. The
// work has CUDA stream semantics (work::on_stream): wait() makes the caller's current stream
// wait for that event and returns at once, so kernels queued after wait() see the result, and
// so does the host through them (item(), cpu()). The tensors the op reads or writes stay alive
// until its stream has run it. barrier() blocks the host, as PyTorch's NCCL barrier does.
//
// Note [NCCL failures]
// ~~~~~~~~~~~~~~~~~~~~
// A collective whose peer died or never came would hold its stream, and everything waiting on
// it, forever. The group's worker thread polls each op's end event in issue order, with NCCL's
// asynchronous error and the group's timeout; on an error or after the timeout (or when a
// launch throws) it aborts the communicator (ncclCommAbort ends its kernels, as PyTorch's
// watchdog does; it never takes the launch lock, so a launch stuck inside NCCL, waiting for a
// peer's connection, does not stop it), fails the op and every op after it with the reason,
// and the group refuses new ops.
// Only then does a work complete (is_completed(), then(), synchronize()). A failed op's
// tensors are kept (the stream may still reach them) until the group is destroyed. After an
// abort the group is done for, and so is the process's use of it, as in PyTorch: what the
// stream still held is not to be trusted; the error reaches the trainer, which ends, and the
// launcher, which stops or restarts the job.
#include "comm/backend/nccl/process_group_nccl.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"
#include "comm/backend/serial_executor.hpp"
#include "comm/backend/socket_ifname.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "kernels/cuda/check.hpp"

#define ACTORCH_NCCL_CHECK(expr)                                                                   \
  do {                                                                                             \
    const ncclResult_t res_ = (expr);                                                              \
    ACTORCH_CHECK(res_ == ncclSuccess, "nccl backend: ", #expr,                                    \
                  " failed: ", ncclGetErrorString(res_));                                          \
  } while (false)

namespace actorch::dist {

namespace {

ncclDataType_t nccl_type(dtype t) {
  switch (t) {
  case dtype::float32: return ncclFloat32;
  case dtype::float64: return ncclFloat64;
  case dtype::float16: return ncclFloat16;
  case dtype::bfloat16: return ncclBfloat16;
  case dtype::int8: return ncclInt8;
  case dtype::uint8: return ncclUint8;
  case dtype::int32: return ncclInt32;
  case dtype::int64: return ncclInt64;
  case dtype::bool_: return ncclUint8;
  case dtype::int16: break; // NCCL has no 16-bit integer type
  }
  ACTORCH_CHECK(false, "ProcessGroupNCCL: NCCL has no type for ", dtype_name(t),
                " tensors; convert them first (e.g. to int32)");
}

ncclRedOp_t nccl_op(const char* op, reduce_op r, dtype t) {
  const bool is_bool = t == dtype::bool_;
  switch (r) {
  case reduce_op::sum: return is_bool ? ncclMax : ncclSum; // bool: OR
  case reduce_op::avg:
    ACTORCH_CHECK(is_floating_point(t), op, ": AVG needs a floating-point tensor but got ",
                  dtype_name(t));
    return ncclAvg;
  case reduce_op::product: return is_bool ? ncclMin : ncclProd; // bool: AND
  case reduce_op::min: return ncclMin;
  case reduce_op::max: return ncclMax;
  case reduce_op::band:
  case reduce_op::bor:
  case reduce_op::bxor: break;
  }
  ACTORCH_FAIL(op, ": ", reduce_op_name(r), " is not supported by the nccl backend");
}

// ncclGroupStart() to end(); a throw in between still ends the group, which would otherwise
// hold every later NCCL call of the thread.
class nccl_group {
public:
  nccl_group() { ACTORCH_NCCL_CHECK(ncclGroupStart()); }
  ~nccl_group() {
    if (!ended_)
      (void)ncclGroupEnd();
  }
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;
  void end() {
    ended_ = true;
    ACTORCH_NCCL_CHECK(ncclGroupEnd());
  }

private:
  bool ended_ = false;
};

class process_group_nccl final : public process_group {
public:
  process_group_nccl(std::shared_ptr<store> st, int rank, int size, milliseconds timeout,
                     std::vector<int> global_ranks, int device)
      : process_group(rank, size, std::move(global_ranks)), store_(std::move(st)),
        timeout_(timeout) {
    // NCCL reads NCCL_SOCKET_IFNAME itself (in ncclGetUniqueId and ncclCommInitRank); an
    // interface that does not exist would fail there as "no socket interface found", so check
    // it first and name the interfaces that exist.
    check_nccl_socket_ifname();
    if (const int count = cuda_device_count(); device < 0 && count > 0) {
      device = int(env_int("LOCAL_RANK", rank, 0, std::numeric_limits<int>::max())) % count;
    }
    const std::string problem = cuda_device_problem(device);
    ACTORCH_CHECK(problem.empty(), "nccl backend on rank ", rank, ": ", problem,
                  "; use the gloo backend for CPU tensors");
    device_ = device;
    cuda::set_device(device_);
    ncclUniqueId id;
    if (rank == 0) {
      ACTORCH_NCCL_CHECK(ncclGetUniqueId(&id));
      store_->set("nccl_unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      store_->wait({"nccl_unique_id"}, timeout_);
      const std::string bytes = store_->get("nccl_unique_id");
      ACTORCH_INTERNAL_ASSERT(bytes.size() == sizeof id, "bad NCCL unique id in the store");
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    // ncclCommInitRank waits for every rank without a limit: meet in the store first, so that
    // a rank that died or never started is an error naming the count instead of a hang.
    if (store_->add("nccl_arrived", 1) == size)
      store_->set("nccl_all_arrived", "1");
    try {
      store_->wait({"nccl_all_arrived"}, timeout_);
    } catch (const std::exception& e) {
      ACTORCH_FAIL("nccl backend: rank ", rank, " waited ", timeout_.count(), " ms, but only ",
                   store_->add("nccl_arrived", 0), " of the ", size,
                   " ranks came to create the communicator (", e.what(), ")");
    }
    ACTORCH_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
    stream_ = cuda::stream::create(device_);
    continuations_ = cuda::stream::create(device_);
    // The works' continuations run on the worker: their kernels go to a stream of their own,
    // not to the legacy default stream every thread of the process shares.
    worker_ = std::make_unique<serial_executor>(serial_executor::options{.on_start = [this] {
      cuda::set_device(device_); // checked above
      cuda::set_stream(*continuations_);
    }});
  }

  ~process_group_nccl() override {
    worker_->shutdown(); // the ops' tasks use the communicator and the stream
    std::lock_guard lock(state_mu_);
    if (!aborted_) {
      ncclCommDestroy(comm_);
      return;
    }
    // The failed ops' tensors, kept since (Note [NCCL failures]): freed once the aborted
    // kernels have left the stream, else left alone for good.
    for (int k = 0; k < 1000 && !stream_->query(); ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!stream_->query())
      (void)new std::vector<std::function<void()>>(std::move(graveyard_));
  }

  std::string backend() const override { return "nccl"; }
  device collective_device() const override { return {device_type::cuda, device_}; }

  work broadcast(tensor& t, int root) override {
    check("broadcast", t);
    check_rank("broadcast", root, "root");
    return enqueue("broadcast",
                   [=, this] {
                     ACTORCH_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                                      nccl_type(t.dtype()), root, comm_,
                                                      raw_stream()));
                   },
                   {t});
  }
  work all_reduce(tensor& t, reduce_op op) override {
    check("all_reduce", t);
    const ncclRedOp_t r = nccl_op("all_reduce", op, t.dtype());
    return enqueue("all_reduce",
                   [=, this] {
                     ACTORCH_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                                      nccl_type(t.dtype()), r, comm_,
                                                      raw_stream()));
                   },
                   {t});
  }
  work reduce(tensor& t, int root, reduce_op op) override {
    check("reduce", t);
    check_rank("reduce", root, "root");
    const ncclRedOp_t r = nccl_op("reduce", op, t.dtype());
    return enqueue("reduce",
                   [=, this] {
                     ACTORCH_NCCL_CHECK(ncclReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                                   nccl_type(t.dtype()), r, root, comm_,
                                                   raw_stream()));
                   },
                   {t});
  }
  work all_gather_into_tensor(tensor& output, const tensor& input) override {
    check("all_gather_into_tensor", output);
    check("all_gather_into_tensor", input);
    ACTORCH_CHECK(output.numel() == input.numel() * size() && output.dtype() == input.dtype(),
                  "all_gather_into_tensor: the output must hold ", size(), " x ", input.numel(),
                  " elements of ", dtype_name(input.dtype()));
    return enqueue("all_gather_into_tensor",
                   [=, this] {
                     ACTORCH_NCCL_CHECK(
                         ncclAllGather(input.data_ptr(), output.data_ptr(), size_t(input.numel()),
                                       nccl_type(input.dtype()), comm_, raw_stream()));
                   },
                   {output});
  }
  work all_gather(std::vector<tensor>& outputs, const tensor& input) override {
    check("all_gather", input);
    check_list("all_gather", outputs, input);
    return enqueue(
        "all_gather",
        [=, this] {
          nccl_group grouped;
          for (int r = 0; r < size(); ++r) {
            if (r == rank())
              continue;
            send_to(input, r);
            recv_into(outputs[size_t(r)], r);
          }
          grouped.end();
          copy_on_stream(outputs[size_t(rank())], input);
        },
        outputs);
  }
  work gather(std::vector<tensor>& outputs, const tensor& input, int root) override {
    check("gather", input);
    check_rank("gather", root, "root");
    if (rank() == root)
      check_list("gather", outputs, input);
    return enqueue(
        "gather",
        [=, this] {
          if (rank() != root) {
            send_to(input, root);
            return;
          }
          nccl_group grouped;
          for (int r = 0; r < size(); ++r)
            if (r != rank())
              recv_into(outputs[size_t(r)], r);
          grouped.end();
          copy_on_stream(outputs[size_t(rank())], input);
        },
        rank() == root ? outputs : std::vector<tensor>{});
  }
  work scatter(tensor& output, const std::vector<tensor>& inputs, int root) override {
    check("scatter", output);
    check_rank("scatter", root, "root");
    if (rank() == root)
      check_list("scatter", inputs, output);
    return enqueue("scatter",
                   [=, this] {
                     if (rank() != root) {
                       recv_into(output, root);
                       return;
                     }
                     nccl_group grouped;
                     for (int r = 0; r < size(); ++r)
                       if (r != rank())
                         send_to(inputs[size_t(r)], r);
                     grouped.end();
                     copy_on_stream(output, inputs[size_t(rank())]);
                   },
                   {output});
  }
  work reduce_scatter(tensor& output, const std::vector<tensor>& inputs, reduce_op op) override {
    check("reduce_scatter", output);
    check_list("reduce_scatter", inputs, output);
    const ncclRedOp_t r = nccl_op("reduce_scatter", op, output.dtype());
    return enqueue(
        "reduce_scatter",
        [=, this] {
          // Each rank's inputs are packed into one buffer, as ncclReduceScatter wants them.
          const size_t n = output.nbytes();
          void* packed = nullptr;
          ACTORCH_CUDA_CHECK(cudaMallocAsync(&packed, n * size_t(size()), raw_stream()));
          for (int q = 0; q < size(); ++q)
            ACTORCH_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(packed) + n * size_t(q),
                                               inputs[size_t(q)].data_ptr(), n,
                                               cudaMemcpyDeviceToDevice, raw_stream()));
          ACTORCH_NCCL_CHECK(ncclReduceScatter(packed, output.data_ptr(), size_t(output.numel()),
                                               nccl_type(output.dtype()), r, comm_, raw_stream()));
          ACTORCH_CUDA_CHECK(cudaFreeAsync(packed, raw_stream()));
        },
        {output});
  }
  work all_to_all(std::vector<tensor>& outputs, const std::vector<tensor>& inputs) override {
    ACTORCH_CHECK(!inputs.empty(), "all_to_all: inputs is empty (needs one tensor per rank)");
    check("all_to_all", inputs[0]);
    check_list("all_to_all", inputs, inputs[0]);
    check_list("all_to_all", outputs, inputs[0]);
    return enqueue(
        "all_to_all",
        [=, this] {
          nccl_group grouped;
          for (int r = 0; r < size(); ++r) {
            send_to(inputs[size_t(r)], r);
            recv_into(outputs[size_t(r)], r);
          }
          grouped.end();
        },
        outputs);
  }
  work barrier() override {
    return enqueue(
        "barrier",
        [this] {
          void* one = nullptr;
          ACTORCH_CUDA_CHECK(cudaMallocAsync(&one, sizeof(float), raw_stream()));
          ACTORCH_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), raw_stream()));
          ACTORCH_NCCL_CHECK(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, raw_stream()));
          ACTORCH_CUDA_CHECK(cudaFreeAsync(one, raw_stream()));
        },
        {}, -1, /*blocking=*/true);
  }
  work monitored_barrier(milliseconds, bool) override {
    ACTORCH_FAIL("monitored_barrier: not supported by the nccl backend (as in PyTorch); use a ",
                 "gloo group");
  }
  work send(const tensor& t, int dst, int tag) override {
    check("send", t);
    check_rank("send", dst, "dst");
    ACTORCH_CHECK(tag == 0, "send: the nccl backend has no tags (got tag ", tag, ")");
    return enqueue(
        "send", [=, this] { send_to(t, dst); }, {}, dst);
  }
  work recv(tensor& t, int src, int tag) override {
    check("recv", t);
    ACTORCH_CHECK(src != -1, "recv: the nccl backend cannot receive from any rank; name src");
    check_rank("recv", src, "src");
    ACTORCH_CHECK(tag == 0, "recv: the nccl backend has no tags (got tag ", tag, ")");
    return enqueue(
        "recv", [=, this] { recv_into(t, src); }, {t}, src);
  }

private:
  void check(const char* op, const tensor& t) const {
    ACTORCH_CHECK(t.defined(), op, ": undefined tensor");
    ACTORCH_CHECK(t.device().is_cuda() && t.device().index == device_, op,
                  ": the nccl backend takes tensors on cuda:", device_, " but got one on ",
                  t.device().str());
    ACTORCH_CHECK(t.is_contiguous(), op, ": the nccl backend takes contiguous tensors (shape ",
                  shape_str(t.sizes()), " is not); call contiguous() first");
  }
  void check_list(const char* op, const std::vector<tensor>& list, const tensor& like) const {
    ACTORCH_CHECK(list.size() == size_t(size()), op, ": needs ", size(), " tensors but got ",
                  list.size());
    for (const auto& t : list) {
      check(op, t);
      ACTORCH_CHECK(t.numel() == like.numel() && t.dtype() == like.dtype(), op,
                    ": every tensor must be ", dtype_name(like.dtype()), " with ", like.numel(),
                    " elements");
    }
  }

  cudaStream_t raw_stream() const { return static_cast<cudaStream_t>(stream_->handle()); }

  // One tensor to or from `peer` on the group's stream (the list ops' tensors were checked to
  // match in count and dtype).
  void send_to(const tensor& t, int peer) const {
    ACTORCH_NCCL_CHECK(
        ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, raw_stream()));
  }
  void recv_into(const tensor& t, int peer) const {
    ACTORCH_NCCL_CHECK(
        ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, raw_stream()));
  }

  // This rank's own part of a gather, scatter or all_gather, on the group's stream.
  void copy_on_stream(const tensor& dst, const tensor& src) const {
    ACTORCH_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                       cudaMemcpyDeviceToDevice, raw_stream()));
  }

  // Queues `launch` (the NCCL calls of op `op` on the group's stream) from this thread behind
  // the ops issued before it, and returns its work: with stream semantics, `outputs` and
  // `source` as its result, or, `blocking`, a work the host waits for (Note [NCCL stream
  // order]). The worker then watches it to its end (Note [NCCL failures]).
  work enqueue(std::string op, std::function<void()> launch, std::vector<tensor> outputs,
               int source = -1, bool blocking = false) {
    std::lock_guard lock(launch_mu_); // held while launching, so the ops run in issue order
    if (std::string why = broken(); !why.empty())
      return work::failed(std::make_exception_ptr(
          actorch::error(op + " refused: the group failed earlier: " + why)));
    cuda::event end;
    try {
      cuda::device_guard on(device_);
      // What the caller queued so far on its current stream; the wait takes the event as it is
      // now, so the next launch may record it again.
      issued_.record(cuda::current_stream(device_));
      issued_.wait(*stream_);
      launch();
      end.record(*stream_);
    } catch (const std::exception& e) {
      const std::string why = op + " failed on rank " + std::to_string(rank()) + ": " + e.what();
      fail_group(why, std::move(launch)); // part of it may be queued
      return work::failed(std::make_exception_ptr(actorch::error(why)));
    }
    const int dev = device_;
    work w = blocking ? work() : work::on_stream(outputs, source, [end, dev] {
      end.wait(cuda::current_stream(dev));
    });
    // `launch` holds the op's tensors (inputs too) until the stream has run it.
    worker_->post([this, op = std::move(op), launch = std::move(launch), w, end, blocking,
                   outputs = std::move(outputs), source]() mutable {
      if (std::string failure = watch(end); !failure.empty()) {
        w.mark_failed(std::make_exception_ptr(
            actorch::error(op + " failed on rank " + std::to_string(rank()) + ": " + failure)));
        std::lock_guard state_lock(state_mu_);
        graveyard_.push_back(std::move(launch)); // the stream may still reach its tensors
        return;
      }
      if (blocking)
        w.mark_completed(outputs, source);
      else
        w.mark_completed();
    });
    return w;
  }

  std::string broken() const {
    if (!failed_.load(std::memory_order_acquire)) // the common case, without the lock
      return {};
    std::lock_guard lock(state_mu_);
    return broken_;
  }

  // The group's end: the first failure is kept as the reason and aborts the communicator
  // (ncclCommAbort ends its kernels, also those a launching thread waits on); `keep` holds
  // tensors the stream may still reach. Never takes launch_mu_ (a launch may be stuck).
  void fail_group(const std::string& why, std::function<void()> keep = {}) {
    std::lock_guard lock(state_mu_);
    if (keep)
      graveyard_.push_back(std::move(keep));
    if (!broken_.empty())
      return;
    broken_ = why;
    failed_.store(true, std::memory_order_release);
    (void)ncclCommAbort(comm_);
    aborted_ = true;
  }

  // Waits for `end` (Note [NCCL failures]); returns why the op failed, or "" once it ran.
  std::string watch(const cuda::event& end) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int polls = 0;; ++polls) {
      if (std::string why = broken(); !why.empty())
        return "the group failed: " + why;
      std::string failure;
      try {
        ncclResult_t async = ncclSuccess;
        ACTORCH_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
        if (async != ncclSuccess)
          failure =
              std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(async);
        else if (end.query())
          return {};
        else if (std::chrono::steady_clock::now() > deadline)
          failure = "not done after the group's timeout of " + std::to_string(timeout_.count()) +
                    " ms (a rank died or did not issue it)";
      } catch (const std::exception& e) {
        failure = e.what();
      }
      if (!failure.empty()) {
        fail_group(failure);
        return failure;
      }
      // Collectives end within microseconds to milliseconds: yield first, then sleep briefly.
      if (polls < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  std::shared_ptr<store> store_;
  milliseconds timeout_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  std::optional<cuda::stream> stream_;           // the group's own, made once the device is known
  std::optional<cuda::stream> continuations_;    // the worker's current stream
  std::mutex launch_mu_;                         // orders the launches; guards issued_
  cuda::event issued_;                           // see enqueue
  std::atomic<bool> failed_{false};              // broken_ is set
  mutable std::mutex state_mu_;                  // guards what follows
  std::string broken_;                           // why the group failed; empty while it works
  bool aborted_ = false;                         // ncclCommAbort freed comm_
  std::vector<std::function<void()>> graveyard_; // failed ops' launches, holding their tensors
  std::unique_ptr<serial_executor> worker_;      // last: stops before the state its tasks use
};

} // namespace

std::shared_ptr<process_group> make_process_group_nccl(std::shared_ptr<store> store, int rank,
                                                       int size, milliseconds timeout,
                                                       std::vector<int> global_ranks, int device) {
  return std::make_shared<process_group_nccl>(std::move(store), rank, size, timeout,
                                              std::move(global_ranks), device);
}

} // namespace actorch::dist
