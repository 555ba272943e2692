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
// and comm hooks read it) on the group's worker thread. Tensors must be CPU and contiguous, as
// Gloo's backend requires; one tensor per list (CPU ranks hold one device), except in the
// *_multigpu collectives, whose lists of several CPU tensors go to comm/multigpu. A Future's
// callbacks (a comm hook's Python `then`) run on the group's worker and take the GIL there, so
// the group is destroyed without the GIL (its end waits for that worker).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>

#include <unistd.h>

#include <algorithm>
#include <optional>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/multigpu.hpp"
#include "comm/store/store.hpp"
#include "core/ops/factory.hpp"

namespace py = pybind11;

namespace actorch::torch_backend {

namespace {

using milliseconds = std::chrono::milliseconds;

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
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    s_->wait(keys, timeout);
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
  TORCH_CHECK(t.device().is_cpu(), "actorch backend: ", op, " takes CPU tensors (got one on ",
              t.device(),
              "); CUDA tensors are not supported "
              "by this build of the backend");
  TORCH_CHECK(t.is_contiguous(), "actorch backend: ", op, ": tensors must be contiguous");
  const auto sizes = t.sizes();
  return from_blob(t.data_ptr(), shape_t(sizes.begin(), sizes.end()), dtype_of(t),
                   [keep = t](void*) mutable { keep.reset(); });
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

/// torch's Work over actorch's: its Future holds `outputs` once the op is done.
class actorch_work final : public ::c10d::Work {
public:
  actorch_work(dist::work w, std::vector<at::Tensor> outputs, ::c10d::OpType type)
      : ::c10d::Work(-1, type), w_(std::move(w)), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    w_.then([fut = future_, outs = outputs_](const dist::work& done) {
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
  void synchronize() override {}
  bool wait(milliseconds timeout) override {
    if (timeout == kNoTimeout)
      w_.wait();
    else
      w_.wait(timeout);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

private:
  dist::work w_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

c10::intrusive_ptr<::c10d::Work> make_work(dist::work w, std::vector<at::Tensor> outputs,
                                           ::c10d::OpType type) {
  return c10::make_intrusive<actorch_work>(std::move(w), std::move(outputs), type);
}

/// The flat actorch tensors of a list of torch tensors (all_gather's outputs, scatter's inputs).
std::vector<tensor> wrap_all(const std::vector<at::Tensor>& ts, const char* op) {
  std::vector<tensor> out;
  for (const auto& t : ts)
    out.push_back(wrap(t, op));
  return out;
}

} // namespace

/// The ProcessGroup torch.distributed gets for backend="actorch".
class process_group_actorch final : public ::c10d::ProcessGroup {
public:
  process_group_actorch(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                        milliseconds timeout)
      : ::c10d::ProcessGroup(rank, size) {
    dist::process_group_gloo::options o;
    o.timeout = timeout;
    pg_ = std::make_unique<dist::process_group_gloo>(std::make_shared<torch_store>(store), rank,
                                                     size, o);
  }

  /// Without the GIL: the group's worker may be running a Future's callbacks (a comm hook's
  /// Python `then`), which take it, and the group's end waits for that worker.
  ~process_group_actorch() override {
    if (::getpid() != maker_) { // a fork's copy (a DataLoader worker): its threads are not here
      (void)pg_.release();
      return;
    }
    std::optional<py::gil_scoped_release> no_gil;
    if (PyGILState_Check())
      no_gil.emplace();
    pg_.reset();
  }

  const std::string getBackendName() const override { return "actorch"; }

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
    return make_work(pg_->broadcast(t, int(o.rootRank)), ts, ::c10d::OpType::BROADCAST);
  }
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& ts,
                                             const ::c10d::AllreduceOptions& o) override {
    if (ts.size() > 1) { // all_reduce_multigpu
      std::vector<tensor> list = wrap_all(ts, "all_reduce_multigpu");
      return make_work(dist::all_reduce_multigpu(list, reduce_op_of(o.reduceOp), group(), true), ts,
                       ::c10d::OpType::ALLREDUCE);
    }
    tensor t = wrap(only(ts, "allreduce"), "allreduce");
    return make_work(pg_->all_reduce(t, reduce_op_of(o.reduceOp)), ts, ::c10d::OpType::ALLREDUCE);
  }
  c10::intrusive_ptr<::c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor>& ts,
                      const ::c10d::AllreduceCoalescedOptions& o) override {
    // One all-reduce per tensor, queued back to back; the work is the last one's (the group
    // runs its collectives in issue order, so the last done means all are).
    TORCH_CHECK(!ts.empty(), "actorch backend: allreduce_coalesced of no tensors");
    std::vector<dist::work> works;
    for (auto& x : ts) {
      tensor t = wrap(x, "allreduce_coalesced");
      works.push_back(pg_->all_reduce(t, reduce_op_of(o.reduceOp)));
    }
    return make_work(dist::when_all(works), ts, ::c10d::OpType::ALLREDUCE_COALESCED);
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
    return make_work(pg_->reduce(t, int(o.rootRank), reduce_op_of(o.reduceOp)), ts,
                     ::c10d::OpType::REDUCE);
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
    return make_work(pg_->all_gather(o, wrap(only(ins, "allgather"), "allgather")), outs[0],
                     ::c10d::OpType::ALLGATHER);
  }
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                   const ::c10d::AllgatherOptions&) override {
    tensor o = wrap(out, "_allgather_base");
    return make_work(pg_->all_gather_into_tensor(o, wrap(in, "_allgather_base")), {out},
                     ::c10d::OpType::_ALLGATHER_BASE);
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
    return make_work(pg_->gather(w, wrap(only(ins, "gather"), "gather"), int(o.rootRank)), outputs,
                     ::c10d::OpType::GATHER);
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
    return make_work(pg_->scatter(out, w, int(o.rootRank)), outs, ::c10d::OpType::SCATTER);
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
    return make_work(
        pg_->reduce_scatter(out, wrap_all(ins[0], "reduce_scatter"), reduce_op_of(o.reduceOp)),
        outs, ::c10d::OpType::REDUCE_SCATTER);
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
    return make_work(pg_->all_to_all(o, i), {out}, ::c10d::OpType::ALLTOALL_BASE);
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
    std::vector<tensor> o = wrap_all(outs, "all_to_all");
    return make_work(pg_->all_to_all(o, wrap_all(ins, "all_to_all")), outs,
                     ::c10d::OpType::ALLTOALL);
  }
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions&) override {
    return make_work(pg_->barrier(), {}, ::c10d::OpType::BARRIER);
  }
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    return make_work(pg_->send(wrap(only(ts, "send"), "send"), dst, tag), ts, ::c10d::OpType::SEND);
  }
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    tensor t = wrap(only(ts, "recv"), "recv");
    return make_work(pg_->recv(t, src, tag), ts, ::c10d::OpType::RECV);
  }
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& ts, int tag) override {
    tensor t = wrap(only(ts, "recv"), "recv");
    return make_work(pg_->recv(t, -1, tag), ts, ::c10d::OpType::RECVANYSOURCE);
  }

private:
  std::unique_ptr<dist::process_group_gloo> pg_;
  pid_t maker_ = ::getpid();
};

} // namespace actorch::torch_backend

PYBIND11_MODULE(_torch_backend, m) {
  using actorch::torch_backend::process_group_actorch;
  m.doc() = "actorch's process groups as a torch.distributed backend (import actorch registers "
            "it as 'actorch')";
  m.attr("built_with_torch") = TORCH_VERSION;
  py::module_::import("torch.distributed");
  py::class_<process_group_actorch, c10::intrusive_ptr<process_group_actorch>,
             ::c10d::ProcessGroup>(m, "ProcessGroupActorch")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<process_group_actorch>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}
