// actorch as a torch.distributed backend: actorch._torch_backend, a torch C++ extension built
// against the machine's torch (Debian's 1.13, libtorch-dev), whose ProcessGroup runs every op on
// actorch's Gloo group (shared memory between the ranks of a host, Gloo's TCP across hosts) over
// the torch tensors' own memory. `import actorch` registers it as the backend "actorch"
// (python/actorch/distributed.py). See Note [actorch as a torch backend].
//
// Note [actorch as a torch backend]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch.distributed calls the creator with the PrefixStore it made for the group (env://,
// tcp://, file://: whatever the user's init_method), the rank, the size and the timeout. The
// group's rendezvous runs through that store (torch_store adapts c10d::Store to actorch's), so
// torchrun, mp.spawn and `actorch launch` all start such programs, and the timeout keeps its
// meaning. Each op wraps the torch tensors as actorch tensors over the same memory (from_blob,
// the deleter holding the torch tensor) and issues the matching op of process_group_gloo; its
// work's completion completes the torch Work and its Future (a List[Tensor], as DDP's reducer
// and comm hooks read it) on the group's worker thread. CPU views keep their strides (the group
// copies them through contiguous buffers), CUDA tensors must be contiguous; one tensor per
// list (CPU ranks hold one device), except in the *_multigpu collectives, whose lists of
// several CPU tensors go to comm/multigpu. A Future's
// callbacks (a comm hook's Python `then`) run on the group's worker and take the GIL there, so
// the group is destroyed without the GIL (its end waits for that worker). They run detached
// from the group's order (serial_executor::detach_current): a callback may issue more ops and
// wait for them, as torch's PowerSGD hook does, while the group runs them on another thread.
//
// Under torch 2.x the same class is a c10d::Backend (2.x's ProcessGroup dispatches each op to
// the backend registered for its tensors' device; the ops are the same). A build that defines
// ACTORCH_TORCH_CUDA (scripts/gpu-check.sh builds one against the GPU machine's torch) also
// takes CUDA tensors: they go to actorch's NCCL group, made at the first CUDA op through the
// same store (keys under "nccl/") on that tensor's device, or where two ranks share a GPU to
// the Gloo group through host copies (Note [Ranks sharing a GPU], comm/backend/host_staged.cpp).
// Each such op is queued behind what
// torch's current stream holds (the NCCL group orders its stream after the issuing thread's
// current stream, here torch's), and the work's wait() makes torch's current stream wait for
// it; the Future, made for that device, completes once the op has run.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <ATen/MemoryOverlap.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#ifndef ACTORCH_TORCH_CUDA
#define ACTORCH_TORCH_CUDA 0
#endif
#if ACTORCH_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/backend/serial_executor.hpp"
#include "comm/multigpu.hpp"
#include "comm/store/store.hpp"
#include "core/ops/factory.hpp"
#if ACTORCH_TORCH_CUDA
#include "comm/backend/host_staged.hpp"
#include "comm/backend/nccl/process_group_nccl.hpp"
#include "comm/store/prefix_store.hpp"
#include "core/cuda/stream.hpp"
#endif

namespace py = pybind11;

namespace actorch::torch_backend {

namespace {

using milliseconds = std::chrono::milliseconds;

#if TORCH_VERSION_MAJOR >= 2
using torch_group = ::c10d::Backend;
#else
using torch_group = ::c10d::ProcessGroup;
#endif

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}

/// torch's store as actorch's: the group's rendezvous and ledger go through the store torch made.
class torch_store final : public dist::store {
public:
  explicit torch_store(c10::intrusive_ptr<::c10d::Store> s)
      : dist::store(s->getTimeout()), s_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    s_->set(key, bytes(value));
  }
  std::string get(const std::string& key) override { return text(s_->get(key)); }
  int64_t add(const std::string& key, int64_t delta) override { return s_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return text(s_->compareSet(key, bytes(expected), bytes(desired)));
  }
  bool check(const std::vector<std::string>& keys) override { return s_->check(keys); }
  /// As dist::store's: an actorch::error naming the keys (torch's stores throw their own types,
  /// which the group would take for a failure of its transport).
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    try {
      s_->wait(keys, timeout);
    } catch (const std::exception& e) {
      ACTORCH_FAIL("torch's store: waited ", timeout.count(), " ms for keys ",
                   dist::join_keys(keys), ": ", e.what());
    }
  }
  bool delete_key(const std::string& key) override { return s_->deleteKey(key); }
  int64_t num_keys() override { return s_->getNumKeys(); }

protected:
  std::string get_now(const std::string& key) override { return text(s_->get(key)); }

private:
  c10::intrusive_ptr<::c10d::Store> s_;
};

dtype dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
  case at::kFloat: return dtype::float32;
  case at::kDouble: return dtype::float64;
  case at::kHalf: return dtype::float16;
  case at::kBFloat16: return dtype::bfloat16;
  case at::kChar: return dtype::int8;
  case at::kByte: return dtype::uint8;
  case at::kShort: return dtype::int16;
  case at::kInt: return dtype::int32;
  case at::kLong: return dtype::int64;
  case at::kBool: return dtype::bool_;
  default:
    TORCH_CHECK(false, "actorch backend: tensors of dtype ", t.scalar_type(),
                " are not supported (float, double, half, bfloat16, int8, uint8, int16, int32, "
                "int64 and bool are)");
  }
}

/// The actorch tensor over `t`'s memory; the deleter keeps `t`'s storage alive.
tensor wrap(const at::Tensor& t, const char* op) {
#if ACTORCH_TORCH_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "actorch backend: ", op,
              " takes CPU or CUDA tensors (got one on ", t.device(), ")");
#else
  TORCH_CHECK(t.device().is_cpu(), "actorch backend: ", op, " takes CPU tensors (got one on ",
              t.device(),
              "); CUDA tensors are not supported "
              "by this build of the backend");
#endif
  TORCH_CHECK(t.layout() == at::kStrided, "actorch backend: ", op, " takes dense tensors (got a ",
              t.layout(), " one; all_reduce alone also takes sparse COO tensors, as gloo does)");
  // A CPU view (a slice, a transpose) keeps its strides: the Gloo group reads and writes it
  // through a contiguous copy where it must, as torch's gloo backend takes views. NCCL needs
  // contiguous CUDA tensors, as torch's NCCL backend says too.
  TORCH_CHECK(t.device().is_cpu() || t.is_contiguous(), "actorch backend: ", op,
              ": CUDA tensors must be contiguous");
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "actorch backend: ", op,
              ": a tensor whose elements share memory (an expand) cannot take a result; pass "
              "t.contiguous()");
  const auto sizes = t.sizes();
  const actorch::device where =
      t.device().is_cuda() ? actorch::device{device_type::cuda, t.device().index()} : kCPU;
  const shape_t strides =
      t.is_contiguous() ? shape_t{} : shape_t(t.strides().begin(), t.strides().end());
  return from_blob(
      t.data_ptr(), shape_t(sizes.begin(), sizes.end()), dtype_of(t),
      [keep = t](void*) mutable { keep.reset(); }, strides, where);
}

const at::Tensor& only(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "actorch backend: ", op, " takes one tensor per rank (got ",
              ts.size(), "): CPU ranks hold one device");
  return ts[0];
}

dist::reduce_op reduce_op_of(const ::c10d::ReduceOp& op) {
  switch (op.op_) {
  case ::c10d::ReduceOp::SUM: return dist::reduce_op::sum;
  case ::c10d::ReduceOp::AVG: return dist::reduce_op::avg;
  case ::c10d::ReduceOp::PRODUCT: return dist::reduce_op::product;
  case ::c10d::ReduceOp::MIN: return dist::reduce_op::min;
  case ::c10d::ReduceOp::MAX: return dist::reduce_op::max;
  case ::c10d::ReduceOp::BAND: return dist::reduce_op::band;
  case ::c10d::ReduceOp::BOR: return dist::reduce_op::bor;
  case ::c10d::ReduceOp::BXOR: return dist::reduce_op::bxor;
  default: TORCH_CHECK(false, "actorch backend: ReduceOp ", int(op.op_), " is not supported");
  }
}

#if ACTORCH_TORCH_CUDA
/// torch's current stream on `d`, made actorch's current stream (cuda::stream_guard) while an op
/// is issued (the NCCL group queues behind it) and while a work is waited on (it then waits).
cuda::stream torch_current_stream(const c10::Device& d) {
  return cuda::stream::borrowed(d.index(), c10::cuda::getCurrentCUDAStream(d.index()).stream());
}
#endif

/// torch's Work over actorch's: its Future holds `outputs` once the op is done. For an op on
/// CUDA tensors (`cuda`), the Future is one of that device and wait() orders torch's current
/// stream after the op instead of blocking the host.
class actorch_work final : public ::c10d::Work {
public:
  actorch_work(dist::work w, std::vector<at::Tensor> outputs, ::c10d::OpType type,
               std::optional<c10::Device> cuda)
      : ::c10d::Work(-1, type), w_(std::move(w)), outputs_(std::move(outputs)), cuda_(cuda),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()),
            cuda ? std::vector<c10::Device>{*cuda} : std::vector<c10::Device>{})) {
    w_.then([fut = future_, outs = outputs_](const dist::work& done) {
      // The Future's callbacks may issue ops of this group and wait for them (torch's
      // PowerSGD hook does): the group's next op must not wait for them to return.
      dist::serial_executor::detach_current();
      if (auto e = done.exception())
        fut->setError(e);
      else
        fut->markCompleted(c10::IValue(outs));
    });
  }
  bool isCompleted() override { return w_.is_completed(); }
  bool isSuccess() const override { return w_.is_success(); }
  std::exception_ptr exception() const override { return w_.exception(); }
  int sourceRank() const override { return w_.source_rank(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {
    if (cuda_)
      wait(kNoTimeout);
  }
  bool wait(milliseconds timeout) override {
#if ACTORCH_TORCH_CUDA
    std::optional<cuda::stream_guard> on_torch_stream;
    if (cuda_)
      on_torch_stream.emplace(torch_current_stream(*cuda_));
#endif
    if (timeout == kNoTimeout)
      w_.wait();
    else
      w_.wait(timeout);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

private:
  dist::work w_;
  std::vector<at::Tensor> outputs_;
  std::optional<c10::Device> cuda_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

c10::intrusive_ptr<::c10d::Work> make_work(dist::work w, std::vector<at::Tensor> outputs,
                                           ::c10d::OpType type,
                                           std::optional<c10::Device> cuda = std::nullopt) {
  return c10::make_intrusive<actorch_work>(std::move(w), std::move(outputs), type, cuda);
}

/// The flat actorch tensors of a list of torch tensors (all_gather's outputs, scatter's inputs).
std::vector<tensor> wrap_all(const std::vector<at::Tensor>& ts, const char* op) {
  std::vector<tensor> out;
  for (const auto& t : ts)
    out.push_back(wrap(t, op));
  return out;
}

} // namespace

#if TORCH_VERSION_MAJOR < 2
// Note [DDP's buckets in shared memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's DDP all-reduces each gradient bucket, a flat tensor its Reducer allocates. In private
// memory, the group's shared-memory all-reduce copies the parts other ranks reduce into the
// segment, and the result back out (Note [Shared-memory all-reduce]). When the bucket is one of
// the group's shared blocks (process_group::empty_shared), every rank maps every rank's bucket
// and the all-reduce reads and writes them in place (Note [Shared buffers]), about 3x faster for
// an 8 MiB bucket (the figures, and DDP's step with and without, are in docs/performance.md).
// python/actorch/distributed.py therefore runs DDP's bucket allocations (its Reducer's
// construction and its one rebuild) in `with_shared_buckets`: for that call, CPU allocations on
// this thread come from the group's empty_shared. That is a collective, as the allocations are:
// torch makes the buckets on every rank alike (it checks the parameters' shapes across ranks first,
// and syncs the rebuilt buckets' order before allocating them). Allocations empty_shared declines
// (up to a small all-reduce's size, or a group across hosts) fall through to torch's allocator, as
// do those of every other thread. The allocator stays installed once a job has used it; outside the
// window it only forwards. torch 2.x changed c10::Allocator's interface; under 2.x buckets stay
// private.
thread_local dist::process_group* t_bucket_group = nullptr;

class bucket_allocator final : public c10::Allocator {
public:
  explicit bucket_allocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    if (t_bucket_group != nullptr) {
      tensor t = t_bucket_group->empty_shared(int64_t(n), dtype::uint8);
      if (t.defined()) {
        void* p = t.data_ptr();
        std::lock_guard lock(mu_);
        live_.emplace(p, std::move(t));
        return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
      }
    }
    return base_->allocate(n);
  }
  // raw_allocate's pointers may be either kind.
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  static bucket_allocator& installed() {
    static bucket_allocator* a = [] {
      auto* made = new bucket_allocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(made, 0);
      return made;
    }();
    return *a;
  }

private:
  static void release(void* p) {
    auto& self = installed();
    std::unique_lock lock(self.mu_);
    auto it = self.live_.find(p);
    if (it == self.live_.end()) {
      lock.unlock();
      self.base_->raw_deleter()(p);
      return;
    }
    tensor block = std::move(it->second); // unmapped after the lock is let go
    self.live_.erase(it);
  }

  c10::Allocator* base_;
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, tensor> live_; // by address: the blocks handed out
};

/// Runs `f` with this thread's CPU allocations from `g`'s shared blocks where it makes them.
py::object with_shared_buckets(dist::process_group& g, const py::function& f) {
  (void)bucket_allocator::installed();
  struct window {
    explicit window(dist::process_group& g) { t_bucket_group = &g; }
    ~window() { t_bucket_group = nullptr; }
  } open(g);
  return f();
}
#endif

/// The ProcessGroup (torch 2.x: the Backend) torch.distributed gets for backend="actorch".
class process_group_actorch final : public torch_group {
public:
  process_group_actorch(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                        milliseconds timeout)
      : torch_group(rank, size), store_(std::make_shared<torch_store>(store)), timeout_(timeout) {
    dist::process_group_gloo::options o;
    o.timeout = timeout;
    pg_ = std::make_unique<dist::process_group_gloo>(store_, rank, size, o);
  }

  /// Without the GIL: the group's worker may be running a Future's callbacks (a comm hook's
  /// Python `then`), which take it, and the group's end waits for that worker.
  ~process_group_actorch() override {
    if (::getpid() != maker_) { // a fork's copy (a DataLoader worker): its threads are not here
      (void)pg_.release();
      if (cuda_) // left alone as well
        (void)new std::shared_ptr<dist::process_group>(std::move(cuda_));
      return;
    }
    std::optional<py::gil_scoped_release> no_gil;
    if (PyGILState_Check())
      no_gil.emplace();
    cuda_.reset(); // before pg_, which a host-staged one runs its ops on
    pg_.reset();
  }

  const std::string getBackendName() const override { return "actorch"; }
  dist::process_group_gloo& gloo() const { return *pg_; }

  /// The group as the free collectives take it (not owning: this object owns it).
  dist::group group() const {
    return std::shared_ptr<dist::process_group>(pg_.get(), [](dist::process_group*) {});
  }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& ts,
                                             const ::c10d::BroadcastOptions& o) override {
    if (ts.size() > 1) { // broadcast_multigpu: CPU tensors standing for devices
      std::vector<tensor> list = wrap_all(ts, "broadcast_multigpu");
      return make_work(
          dist::broadcast_multigpu(list, int(o.rootRank), group(), true, int(o.rootTensor)), ts,
          ::c10d::OpType::BROADCAST);
    }
    tensor t = wrap(only(ts, "broadcast"), "broadcast");
    return issue(ts[0], ts, ::c10d::OpType::BROADCAST,
                 [&](dist::process_group& g) { return g.broadcast(t, int(o.rootRank)); });
  }
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& ts,
                                             const ::c10d::AllreduceOptions& o) override {
    if (ts.size() > 1) { // all_reduce_multigpu
      std::vector<tensor> list = wrap_all(ts, "all_reduce_multigpu");
      return make_work(dist::all_reduce_multigpu(list, reduce_op_of(o.reduceOp), group(), true), ts,
                       ::c10d::OpType::ALLREDUCE);
    }
    if (only(ts, "allreduce").is_sparse())
      return sparse_allreduce(ts[0], o);
    tensor t = wrap(ts[0], "allreduce");
    return issue(ts[0], ts, ::c10d::OpType::ALLREDUCE,
                 [&](dist::process_group& g) { return g.all_reduce(t, reduce_op_of(o.reduceOp)); });
  }
  c10::intrusive_ptr<::c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor>& ts,
                      const ::c10d::AllreduceCoalescedOptions& o) override {
    // One all-reduce per tensor, queued back to back; the work is the last one's (the group
    // runs its collectives in issue order, so the last done means all are).
    TORCH_CHECK(!ts.empty(), "actorch backend: allreduce_coalesced of no tensors");
    std::vector<tensor> list;
    for (const auto& x : ts) {
      TORCH_CHECK(x.device() == ts[0].device(),
                  "actorch backend: allreduce_coalesced's tensors are on ", ts[0].device(), " and ",
                  x.device());
      list.push_back(wrap(x, "allreduce_coalesced"));
    }
    return issue(ts[0], ts, ::c10d::OpType::ALLREDUCE_COALESCED, [&](dist::process_group& g) {
      std::vector<dist::work> works;
      for (tensor& t : list)
        works.push_back(g.all_reduce(t, reduce_op_of(o.reduceOp)));
      return dist::when_all(works);
    });
  }
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& ts,
                                          const ::c10d::ReduceOptions& o) override {
    if (ts.size() > 1) { // reduce_multigpu
      std::vector<tensor> list = wrap_all(ts, "reduce_multigpu");
      return make_work(dist::reduce_multigpu(list, int(o.rootRank), reduce_op_of(o.reduceOp),
                                             group(), true, int(o.rootTensor)),
                       ts, ::c10d::OpType::REDUCE);
    }
    tensor t = wrap(only(ts, "reduce"), "reduce");
    return issue(ts[0], ts, ::c10d::OpType::REDUCE, [&](dist::process_group& g) {
      return g.reduce(t, int(o.rootRank), reduce_op_of(o.reduceOp));
    });
  }
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs,
                                             std::vector<at::Tensor>& ins,
                                             const ::c10d::AllgatherOptions&) override {
    if (ins.size() > 1) { // all_gather_multigpu
      std::vector<std::vector<tensor>> lists;
      std::vector<at::Tensor> all;
      for (const auto& l : outs) {
        lists.push_back(wrap_all(l, "all_gather_multigpu"));
        all.insert(all.end(), l.begin(), l.end());
      }
      return make_work(
          dist::all_gather_multigpu(lists, wrap_all(ins, "all_gather_multigpu"), group(), true),
          all, ::c10d::OpType::ALLGATHER);
    }
    TORCH_CHECK(outs.size() == 1, "actorch backend: allgather takes one output list");
    std::vector<tensor> o = wrap_all(outs[0], "allgather");
    tensor in = wrap(only(ins, "allgather"), "allgather");
    return issue(ins[0], outs[0], ::c10d::OpType::ALLGATHER,
                 [&](dist::process_group& g) { return g.all_gather(o, in); });
  }
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                   const ::c10d::AllgatherOptions&) override {
    tensor o = wrap(out, "_allgather_base"), i = wrap(in, "_allgather_base");
    return issue(in, {out}, ::c10d::OpType::_ALLGATHER_BASE,
                 [&](dist::process_group& g) { return g.all_gather_into_tensor(o, i); });
  }
  /// all_gather_coalesced: outs[r][i] receives rank r's ins[i]. As torch's gloo does it: the
  /// inputs flattened into one buffer, one all_gather_into_tensor, and each rank's part copied
  /// out into its tensors (on the group's worker, when the gather is done).
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                                       std::vector<at::Tensor>& ins,
                                                       const ::c10d::AllgatherOptions&) override {
    const char* op = "all_gather_coalesced";
    TORCH_CHECK(!ins.empty(), "actorch backend: ", op, " of no tensors");
    TORCH_CHECK(int64_t(outs.size()) == getSize(), "actorch backend: ", op, ": ", outs.size(),
                " output lists for a world of ", getSize(), " (one list per rank)");
    for (const at::Tensor& t : ins) {
      TORCH_CHECK(t.is_cpu(), "actorch backend: ", op, " takes CPU tensors (got one on ",
                  t.device(), ")");
      TORCH_CHECK(t.layout() == at::kStrided, "actorch backend: ", op, " takes dense tensors");
      TORCH_CHECK(t.scalar_type() == ins[0].scalar_type(), "actorch backend: ", op,
                  ": the inputs mix ", ins[0].scalar_type(), " and ", t.scalar_type());
    }
    std::vector<at::Tensor> all;
    for (size_t r = 0; r < outs.size(); ++r) {
      TORCH_CHECK(outs[r].size() == ins.size(), "actorch backend: ", op, ": output list ", r,
                  " has ", outs[r].size(), " tensors for ", ins.size(), " inputs");
      for (size_t i = 0; i < ins.size(); ++i) {
        const at::Tensor& o = outs[r][i];
        TORCH_CHECK(o.sizes() == ins[i].sizes() && o.scalar_type() == ins[i].scalar_type() &&
                        o.is_cpu(),
                    "actorch backend: ", op, ": output ", i, " of list ", r, " is ",
                    o.scalar_type(), o.sizes(), " on ", o.device(), ", not input ", i, "'s ",
                    ins[i].scalar_type(), ins[i].sizes(), " on the CPU");
        all.push_back(o);
      }
    }
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : ins)
      flat.push_back(t.reshape(-1));
    const at::Tensor in = at::cat(flat);
    if (in.numel() == 0) { // nothing to gather on any rank (their shapes agree)
      dist::work done;
      done.mark_completed();
      return make_work(std::move(done), all, ::c10d::OpType::ALLGATHER_COALESCED);
    }
    at::Tensor gathered = at::empty({getSize(), in.numel()}, in.options());
    tensor o = wrap(gathered, op), i = wrap(in, op);
    dist::work w = pg_->all_gather_into_tensor(o, i).then([=](const dist::work& done) mutable {
      if (done.exception())
        return; // the work fails with it
      for (size_t r = 0; r < outs.size(); ++r)
        for (size_t k = 0, at = 0; k < ins.size(); at += size_t(ins[k].numel()), ++k)
          outs[r][k].copy_(
              gathered[int64_t(r)].narrow(0, int64_t(at), ins[k].numel()).view(ins[k].sizes()));
    });
    return make_work(std::move(w), all, ::c10d::OpType::ALLGATHER_COALESCED);
  }
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outs,
                                          std::vector<at::Tensor>& ins,
                                          const ::c10d::GatherOptions& o) override {
    std::vector<tensor> w;
    std::vector<at::Tensor> outputs;
    if (getRank() == o.rootRank) {
      TORCH_CHECK(outs.size() == 1, "actorch backend: gather takes one output list on the root");
      w = wrap_all(outs[0], "gather");
      outputs = outs[0];
    }
    tensor in = wrap(only(ins, "gather"), "gather");
    return issue(ins[0], outputs, ::c10d::OpType::GATHER,
                 [&](dist::process_group& g) { return g.gather(w, in, int(o.rootRank)); });
  }
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outs,
                                           std::vector<std::vector<at::Tensor>>& ins,
                                           const ::c10d::ScatterOptions& o) override {
    std::vector<tensor> w;
    if (getRank() == o.rootRank) {
      TORCH_CHECK(ins.size() == 1, "actorch backend: scatter takes one input list on the root");
      w = wrap_all(ins[0], "scatter");
    }
    tensor out = wrap(only(outs, "scatter"), "scatter");
    return issue(outs[0], outs, ::c10d::OpType::SCATTER,
                 [&](dist::process_group& g) { return g.scatter(out, w, int(o.rootRank)); });
  }
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                  std::vector<std::vector<at::Tensor>>& ins,
                                                  const ::c10d::ReduceScatterOptions& o) override {
    if (outs.size() > 1) { // reduce_scatter_multigpu
      std::vector<tensor> list = wrap_all(outs, "reduce_scatter_multigpu");
      std::vector<std::vector<tensor>> inputs;
      for (const auto& l : ins)
        inputs.push_back(wrap_all(l, "reduce_scatter_multigpu"));
      return make_work(
          dist::reduce_scatter_multigpu(list, inputs, reduce_op_of(o.reduceOp), group(), true),
          outs, ::c10d::OpType::REDUCE_SCATTER);
    }
    TORCH_CHECK(ins.size() == 1, "actorch backend: reduce_scatter takes one input list");
    tensor out = wrap(only(outs, "reduce_scatter"), "reduce_scatter");
    std::vector<tensor> in = wrap_all(ins[0], "reduce_scatter");
    return issue(outs[0], outs, ::c10d::OpType::REDUCE_SCATTER, [&](dist::process_group& g) {
      return g.reduce_scatter(out, in, reduce_op_of(o.reduceOp));
    });
  }
  /// reduce_scatter_tensor: `in` is the world size's parts of `out`'s shape, back to back.
  c10::intrusive_ptr<::c10d::Work>
  _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                       const ::c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK(in.is_contiguous(), "actorch backend: reduce_scatter_tensor: the input must be "
                                    "contiguous");
    TORCH_CHECK(in.numel() == out.numel() * getSize(),
                "actorch backend: reduce_scatter_tensor: the input has ", in.numel(),
                " elements, not the world size ", getSize(), " times the output's ", out.numel());
    std::vector<at::Tensor> parts;
    for (const at::Tensor& part : in.view(-1).chunk(getSize()))
      parts.push_back(part.view(out.sizes()));
    tensor t = wrap(out, "reduce_scatter_tensor");
    std::vector<tensor> list = wrap_all(parts, "reduce_scatter_tensor");
    return issue(in, {out}, ::c10d::OpType::_REDUCE_SCATTER_BASE, [&](dist::process_group& g) {
      return g.reduce_scatter(t, list, reduce_op_of(o.reduceOp));
    });
  }
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                                 std::vector<int64_t>& out_splits,
                                                 std::vector<int64_t>& in_splits,
                                                 const ::c10d::AllToAllOptions&) override {
    const int64_t n = getSize();
    if (!out_splits.empty() || !in_splits.empty())
      return alltoall_uneven(out, in, out_splits, in_splits);
    TORCH_CHECK(in.dim() > 0 && in.size(0) % n == 0 && out.size(0) % n == 0,
                "actorch backend: all_to_all_single: dim 0 (", in.dim() ? in.size(0) : 0,
                ") must divide by the world size ", n);
    std::vector<at::Tensor> ins = in.chunk(n), outs = out.chunk(n);
    std::vector<tensor> i = wrap_all(ins, "all_to_all_single"),
                        o = wrap_all(outs, "all_to_all_single");
    return issue(in, {out}, ::c10d::OpType::ALLTOALL_BASE,
                 [&](dist::process_group& g) { return g.all_to_all(o, i); });
  }
  /// all_to_all_single with split sizes: each rank's chunks padded to the largest split of any
  /// rank (agreed by a MAX all-reduce first), one equal all_to_all, then each received chunk's
  /// rows copied out of its padding (on the group's worker, when the exchange is done).
  c10::intrusive_ptr<::c10d::Work> alltoall_uneven(at::Tensor& out, at::Tensor& in,
                                                   std::vector<int64_t> out_splits,
                                                   std::vector<int64_t> in_splits) {
    const int64_t n = getSize();
    const auto equal = [&](const at::Tensor& t, std::vector<int64_t>& splits, const char* what) {
      if (splits.empty()) {
        TORCH_CHECK(t.dim() > 0 && t.size(0) % n == 0, "actorch backend: all_to_all_single: ", what,
                    "'s dim 0 must divide by the world size ", n, " without split sizes");
        splits.assign(size_t(n), t.size(0) / n);
      }
      TORCH_CHECK(int64_t(splits.size()) == n, "actorch backend: all_to_all_single: ", what,
                  " split sizes has ", splits.size(), " entries for a world of ", n);
      int64_t total = 0;
      for (const int64_t s : splits) {
        TORCH_CHECK(s >= 0, "actorch backend: all_to_all_single: a negative ", what, " split");
        total += s;
      }
      TORCH_CHECK(t.dim() > 0 && total == t.size(0), "actorch backend: all_to_all_single: ", what,
                  " split sizes sum to ", total, " but dim 0 is ", t.dim() ? t.size(0) : 0);
    };
    TORCH_CHECK(
        in.is_cpu(),
        "actorch backend: all_to_all_single with split sizes takes CPU tensors (got one on ",
        in.device(), ")");
    equal(in, in_splits, "input");
    equal(out, out_splits, "output");
    at::Tensor longest =
        at::full({1}, *std::max_element(in_splits.begin(), in_splits.end()), at::kLong);
    tensor l = wrap(longest, "all_to_all_single");
    pg_->all_reduce(l, dist::reduce_op::max).wait();
    const int64_t m = longest.item<int64_t>();
    std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
    shape[0] = n * m;
    at::Tensor padded_in = at::zeros(shape, in.options()),
               padded_out = at::empty(shape, in.options());
    for (int64_t i = 0, at = 0; i < n; at += in_splits[size_t(i)], ++i)
      padded_in.narrow(0, i * m, in_splits[size_t(i)])
          .copy_(in.narrow(0, at, in_splits[size_t(i)]));
    std::vector<tensor> ins = wrap_all(padded_in.chunk(n), "all_to_all_single"),
                        outs = wrap_all(padded_out.chunk(n), "all_to_all_single");
    dist::work w = pg_->all_to_all(outs, ins).then([=](const dist::work& done) mutable {
      if (done.exception())
        return; // the work fails with it
      for (int64_t i = 0, at = 0; i < n; at += out_splits[size_t(i)], ++i)
        out.narrow(0, at, out_splits[size_t(i)])
            .copy_(padded_out.narrow(0, i * m, out_splits[size_t(i)]));
    });
    return make_work(std::move(w), {out}, ::c10d::OpType::ALLTOALL_BASE);
  }

  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outs,
                                            std::vector<at::Tensor>& ins,
                                            const ::c10d::AllToAllOptions&) override {
    TORCH_CHECK(!ins.empty(), "actorch backend: all_to_all of no tensors");
    std::vector<tensor> o = wrap_all(outs, "all_to_all"), i = wrap_all(ins, "all_to_all");
    return issue(ins[0], outs, ::c10d::OpType::ALLTOALL,
                 [&](dist::process_group& g) { return g.all_to_all(o, i); });
  }
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions&) override {
    return make_work(pg_->barrier(), {}, ::c10d::OpType::BARRIER);
  }
  /// dist.monitored_barrier (which import actorch lets reach this group, Note [Monitored
  /// barrier]): actorch's, through the store, in torch's gloo's words.
  void monitoredBarrier(const ::c10d::BarrierOptions& o, bool wait_all_ranks) override {
    pg_->monitored_barrier(o.timeout == ::c10d::kUnsetTimeout ? timeout_ : o.timeout,
                           wait_all_ranks)
        .wait();
  }
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    tensor t = wrap(only(ts, "send"), "send");
    return issue(ts[0], ts, ::c10d::OpType::SEND,
                 [&](dist::process_group& g) { return g.send(t, dst, tag); });
  }
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    tensor t = wrap(only(ts, "recv"), "recv");
    return issue(ts[0], ts, ::c10d::OpType::RECV,
                 [&](dist::process_group& g) { return g.recv(t, src, tag); });
  }
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& ts, int tag) override {
    tensor t = wrap(only(ts, "recv"), "recv");
    return issue(ts[0], ts, ::c10d::OpType::RECVANYSOURCE,
                 [&](dist::process_group& g) { return g.recv(t, -1, tag); });
  }

private:
  /// all_reduce (SUM) of a sparse COO tensor, as torch's gloo does it (what DDP sends for an
  /// nn.Embedding(sparse=True)'s gradient): every rank's indices and values gathered, summed
  /// by coalescing, and the sum written into `t`. The three gathers (counts, indices, values)
  /// run in the group's order and the call returns once they are done.
  c10::intrusive_ptr<::c10d::Work> sparse_allreduce(at::Tensor& t,
                                                    const ::c10d::AllreduceOptions& o) {
    TORCH_CHECK(o.reduceOp == ::c10d::ReduceOp::SUM,
                "actorch backend: all_reduce of a sparse tensor sums (ReduceOp.SUM) only");
    TORCH_CHECK(t.layout() == at::kSparse && t.device().is_cpu(),
                "actorch backend: all_reduce takes sparse COO tensors on the CPU (got ", t.layout(),
                " on ", t.device(), ")");
    const at::Tensor in = t.coalesce();
    const int64_t n = getSize();
    // Every rank's count of entries, then the indices and values padded to the largest.
    at::Tensor count = at::full({1}, in._nnz(), at::kLong);
    at::Tensor counts = at::empty({n}, at::kLong);
    gather_into(counts, count, "all_reduce (sparse)");
    const int64_t most = counts.max().item<int64_t>();
    const at::Tensor idx = in._indices(), val = in._values();
    std::vector<int64_t> val_shape = val.sizes().vec();
    val_shape[0] = most;
    at::Tensor my_idx = at::zeros({idx.size(0), most}, idx.options());
    at::Tensor my_val = at::zeros(val_shape, val.options());
    my_idx.narrow(1, 0, idx.size(1)).copy_(idx);
    my_val.narrow(0, 0, val.size(0)).copy_(val);
    std::vector<int64_t> all_idx_shape{n, idx.size(0), most}, all_val_shape{n};
    all_val_shape.insert(all_val_shape.end(), val_shape.begin(), val_shape.end());
    at::Tensor all_idx = at::empty(all_idx_shape, idx.options());
    at::Tensor all_val = at::empty(all_val_shape, val.options());
    gather_into(all_idx, my_idx, "all_reduce (sparse)");
    gather_into(all_val, my_val, "all_reduce (sparse)");
    std::vector<at::Tensor> idxs, vals;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t k = counts[r].item<int64_t>();
      idxs.push_back(all_idx[r].narrow(1, 0, k));
      vals.push_back(all_val[r].narrow(0, 0, k));
    }
    const at::Tensor sum =
        at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), in.sizes()).coalesce();
    t.copy_(sum);
    dist::work done;
    done.mark_completed();
    return make_work(std::move(done), {t}, ::c10d::OpType::ALLREDUCE);
  }

  /// all_gather_into_tensor of `in` (contiguous) into `out`, waited for.
  void gather_into(at::Tensor& out, const at::Tensor& in, const char* op) {
    tensor o = wrap(out, op), i = wrap(in.contiguous(), op);
    pg_->all_gather_into_tensor(o, i).wait();
  }

  /// Issues `launch(group)` on the group for `like`'s device (the Gloo group for CPU tensors,
  /// the NCCL group for CUDA ones, queued behind torch's current stream) and returns its work
  /// as torch's, holding `outputs`.
  template <class Launch>
  c10::intrusive_ptr<::c10d::Work> issue(const at::Tensor& like, std::vector<at::Tensor> outputs,
                                         ::c10d::OpType type, Launch&& launch) {
#if ACTORCH_TORCH_CUDA
    if (like.is_cuda()) {
      dist::process_group& g = cuda_group(like.device());
      cuda::stream_guard on_torch_stream(torch_current_stream(like.device()));
      return make_work(launch(g), std::move(outputs), type, like.device());
    }
#else
    (void)like;
#endif
    return make_work(launch(*pg_), std::move(outputs), type);
  }

#if ACTORCH_TORCH_CUDA
  /// The group for CUDA tensors, made by the first CUDA op (every rank issues it, as the
  /// rendezvous needs) on that op's device, through the group's store under "nccl/": actorch's
  /// NCCL group, or where two ranks share a GPU (NCCL refuses them) this group's Gloo group over
  /// host copies, as torch's gloo takes CUDA tensors (Note [Ranks sharing a GPU]).
  dist::process_group& cuda_group(const c10::Device& d) {
    std::lock_guard lock(cuda_mu_);
    if (!cuda_) {
      auto s = std::make_shared<dist::prefix_store>("nccl/", store_);
      cuda_ = dist::ranks_share_a_gpu(*s, getRank(), getSize(), d.index())
                  ? dist::make_host_staged_group(group(), d.index())
                  : dist::make_process_group_nccl(s, getRank(), getSize(), timeout_, {}, d.index());
      cuda_device_ = d.index();
    }
    TORCH_CHECK(d.index() == cuda_device_,
                "actorch backend: this group's CUDA ops run on cuda:", cuda_device_,
                " (its first CUDA op's device), not on ", d);
    return *cuda_;
  }
#endif

  std::shared_ptr<dist::store> store_;
  std::unique_ptr<dist::process_group_gloo> pg_;
  milliseconds timeout_;
  // CUDA tensors' group (ACTORCH_TORCH_CUDA builds only), made when first needed.
  std::mutex cuda_mu_;
  std::shared_ptr<dist::process_group> cuda_;
  int cuda_device_ = -1;
  pid_t maker_ = ::getpid();
};

} // namespace actorch::torch_backend

PYBIND11_MODULE(_torch_backend, m) {
  using actorch::torch_backend::process_group_actorch;
  m.doc() = "actorch's process groups as a torch.distributed backend (import actorch registers "
            "it as 'actorch')";
  m.attr("built_with_torch") = TORCH_VERSION;
  py::module_::import("torch.distributed");
  m.attr("devices") = ACTORCH_TORCH_CUDA ? std::vector<std::string>{"cpu", "cuda"}
                                         : std::vector<std::string>{"cpu"};
  py::class_<process_group_actorch, c10::intrusive_ptr<process_group_actorch>,
             actorch::torch_backend::torch_group>(m, "ProcessGroupActorch")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<process_group_actorch>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
#if TORCH_VERSION_MAJOR < 2
      .def(
          "_with_shared_buckets",
          [](process_group_actorch& self, const py::function& f) {
            return actorch::torch_backend::with_shared_buckets(self.gloo(), f);
          },
          "Calls f() with this thread's CPU allocations in the group's shared blocks where it "
          "makes them (DDP's buckets: Note [DDP's buckets in shared memory])")
#endif
      .def(
          "_shared_blocks", [](process_group_actorch& self) { return self.gloo().shared_blocks(); },
          "How many of the group's shared blocks are alive");
}
