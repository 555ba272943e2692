// replica_group over a process group, and the shared-memory level of trainer threads in one
// process (see Note [Local reduction]).
#include "comm/ddp/replica_group.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "base/error.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/cuda/stream.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

work replica_group::all_reduce_coalesced(std::vector<tensor> ts, reduce_op op) {
  // One flat buffer: each tensor copied in, reduced once, copied back out.
  int64_t numel = 0;
  for (const tensor& t : ts) {
    ACTORCH_CHECK(t.defined() && t.dtype() == ts.front().dtype(),
                  "all_reduce_coalesced: the tensors must be defined and of one dtype");
    numel += t.numel();
  }
  if (ts.empty())
    return work::completed();
  tensor flat = empty({numel}, {.dtype = ts.front().dtype(), .device = ts.front().device()});
  {
    no_grad guard;
    int64_t offset = 0;
    for (const tensor& t : ts) {
      flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
      offset += t.numel();
    }
  }
  work out;
  all_reduce(flat, op).then([out, flat, ts](const work& w) {
    if (auto e = w.exception()) {
      out.mark_failed(e);
      return;
    }
    try {
      no_grad guard;
      int64_t offset = 0;
      for (const tensor& t : ts) {
        tensor dst = t;
        dst.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
      // On a GPU the copies were queued on this (the group's) thread's stream: done before the
      // work completes, so that the waiter's stream sees them whichever it is.
      if (flat.device().is_cuda())
        cuda::current_stream(flat.device().index).synchronize();
    } catch (...) {
      out.mark_failed(std::current_exception());
      return;
    }
    out.mark_completed(ts);
  });
  return out;
}

tensor replica_group::new_buffer(int64_t numel, dtype dt) {
  return zeros({numel}, {.dtype = dt, .device = collective_device()});
}

tensor process_exchange::empty_shared(int64_t, dtype) {
  return {};
}

namespace {

class process_group_replicas final : public replica_group {
public:
  explicit process_group_replicas(std::shared_ptr<process_group> pg) : pg_(std::move(pg)) {
    ACTORCH_CHECK(pg_ != nullptr, "process_replicas: the process group is null");
    ACTORCH_CHECK(pg_->rank() >= 0, "process_replicas: this process is not a member of the group");
  }
  int rank() const override { return pg_->rank(); }
  device collective_device() const override { return pg_->collective_device(); }
  int size() const override { return pg_->size(); }
  // The group's own work, whose result()[0] is the tensor (over NCCL with its stream
  // semantics).
  work all_reduce(const tensor& t, reduce_op op) override {
    tensor x = t;
    return pg_->all_reduce(x, op);
  }
  tensor new_buffer(int64_t numel, dtype dt) override {
    tensor t = pg_->empty_shared(numel, dt); // undefined where the group has none (NCCL)
    return t.defined() ? t : replica_group::new_buffer(numel, dt);
  }

private:
  std::shared_ptr<process_group> pg_;
};

} // namespace

std::shared_ptr<replica_group> process_replicas(std::shared_ptr<process_group> pg) {
  return std::make_shared<process_group_replicas>(std::move(pg));
}

void broadcast_from_rank0(replica_group& g, std::vector<tensor> ts) {
  broadcast_from(g, std::move(ts), 0);
}

void broadcast_from(replica_group& g, std::vector<tensor> ts, int src) {
  // A sum where every rank but src contributes zeros: x + 0 is exact, so src's values arrive
  // bit for bit. It costs a reduction instead of a copy, which is fine for construction-time
  // and buffer broadcasts. One all_reduce_coalesced per dtype (in order of first appearance,
  // the same on every replica).
  std::vector<dtype> order;
  std::map<dtype, std::vector<tensor>> by_dtype;
  for (const tensor& t : ts) {
    ACTORCH_CHECK(t.defined(), "broadcast_from_rank0: an undefined tensor");
    auto [it, inserted] = by_dtype.try_emplace(t.dtype());
    if (inserted)
      order.push_back(t.dtype());
    it->second.push_back(t);
  }
  no_grad guard;
  const device dev = g.collective_device();
  for (dtype dt : order) {
    const std::vector<tensor>& given = by_dtype.at(dt);
    std::vector<tensor> group; // the tensors, or copies on the collective device
    for (const tensor& t : given)
      group.push_back(t.to(dev));
    if (g.rank() != src)
      for (tensor& t : group)
        t.zero_();
    g.all_reduce_coalesced(group, reduce_op::sum).wait();
    for (size_t i = 0; i < given.size(); ++i)
      if (!group[i].is_same(given[i]))
        tensor(given[i]).copy_(group[i]);
  }
}

tensor all_gather_rows(replica_group& g, const tensor& row, int64_t pad) {
  ACTORCH_CHECK(row.dim() == 1 && row.dtype() == dtype::int64,
                "all_gather_rows: expected a 1-D int64 row but got ", dtype_name(row.dtype()),
                " of shape ", shape_str(row.sizes()));
  const device dev = g.collective_device();
  tensor len = full({1}, row.numel(), {.dtype = dtype::int64, .device = dev});
  work lw = g.all_reduce(len, reduce_op::max);
  lw.wait();
  const int64_t width = lw.result().at(0).item<int64_t>();
  // Each rank writes its row, shifted by -pad so that the untouched slots of other ranks sum
  // to zero, and pad is added back after the sum.
  tensor rows = zeros({g.size(), width}, {.dtype = dtype::int64, .device = dev});
  rows.select(0, g.rank()).narrow(0, 0, row.numel()).copy_(row);
  rows.select(0, g.rank()).sub_(pad);
  work w = g.all_reduce(rows, reduce_op::sum);
  w.wait();
  return w.result().at(0).add(pad).cpu();
}

// Note [Local reduction]
// ~~~~~~~~~~~~~~~~~~~~~~
// The replicas of one process are trainer threads sharing memory. Their n-th collectives
// meet in one entry, which keeps each replica's tensor (no copy on arrival). The last to
// arrive reduces them in place, in local-index order (so the bits do not depend on who came
// first): with one process it folds every replica's tensor and writes the result straight
// back into each (reduce_into_all: per cache-sized chunk, one read and one write of each
// tensor, the AVG division fused); with several processes it folds them into replica 0's
// tensor, hands that to the process exchange, and when the exchange completes, divides (AVG)
// and copies the result into the other replicas' tensors. Each replica then finds the
// reduction in its own tensor. A replica does not touch its tensor until its work completes
// (every caller waits), so nobody reads a tensor its owner is rewriting.

// Note [Replicas on GPUs]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A replica on a GPU hands over tensors that kernels on its thread's current stream may still
// be writing (backward's gradients). It records an event there on arrival, without waiting;
// the replica that reduces waits for every arrival's event, then runs the reduction on its
// own thread's current streams, copying a tensor of another device to the first replica's
// device before combining it (replicas may also share a device). Before it hands the sum to
// the exchange (whose collective starts from the comm actor's thread and orders itself after
// that thread's stream, Note [NCCL stream order]) and before it completes the works (after
// which each replica's own stream reads its result), it waits for its streams to run what it
// queued. Only the reducing thread blocks; the stream of each replica stays its own.
struct local_replicas::state {
  struct entry {
    std::mutex mu;
    std::vector<std::vector<tensor>> parts; // by local index: each replica's tensors
    std::vector<work> done;                 // by local index
    std::vector<cuda::event> written;       // where the arrived GPU tensors are final
    reduce_op op = reduce_op::sum;
    int arrived = 0;
    int first = -1;         // the local index that arrived first (its tensor shapes the check)
    bool submitted = false; // the last replica arrived; the reduction is under way
    bool failed = false;
  };

  std::mutex mu;
  int num_local = 0;
  std::shared_ptr<process_exchange> exchange;
  std::vector<device> devices; // by local index
  std::vector<uint64_t> next_seq;
  std::map<uint64_t, std::shared_ptr<entry>> pending;
  std::exception_ptr aborted;

  int world() const { return num_local * exchange->num_processes(); }

  work all_reduce(int local, std::vector<tensor> ts, reduce_op op);
};

namespace {

void check_local_op(reduce_op op) {
  ACTORCH_CHECK(op == reduce_op::sum || op == reduce_op::avg || op == reduce_op::min ||
                    op == reduce_op::max,
                "all_reduce across replicas: ", reduce_op_name(op),
                " is not supported (SUM, AVG, MIN and MAX are)");
}

// The CUDA devices of `ts`, each once.
std::vector<int> gpus_of(const std::vector<tensor>& ts) {
  std::vector<int> gpus;
  for (const tensor& t : ts)
    if (t.device().is_cuda() && std::find(gpus.begin(), gpus.end(), t.device().index) == gpus.end())
      gpus.push_back(t.device().index);
  return gpus;
}

// Marks, on this thread's current stream of each GPU holding one of `ts`, the point where the
// kernels queued so far (which write them) are done (Note [Replicas on GPUs]).
void record_written(const std::vector<tensor>& ts, std::vector<cuda::event>& out) {
  for (int gpu : gpus_of(ts))
    out.emplace_back().record(cuda::current_stream(gpu));
}

// Blocks until this thread's current streams of the GPUs holding `ts` have run what it queued.
void settle(const std::vector<tensor>& ts) {
  for (int gpu : gpus_of(ts))
    cuda::current_stream(gpu).synchronize();
}

// Blocks until `events` have completed (Note [Replicas on GPUs]).
void wait_for(const std::vector<cuda::event>& events) {
  for (const cuda::event& ev : events)
    ev.synchronize();
}

// sum <- sum (op) t; t may be on another device.
void combine(tensor& sum, const tensor& t_anywhere, reduce_op op) {
  no_grad guard;
  const tensor t = t_anywhere.to(sum.device());
  switch (op) {
  case reduce_op::sum:
  case reduce_op::avg: sum.add_(t); break;
  case reduce_op::min: sum.copy_(minimum(sum, t)); break;
  case reduce_op::max: sum.copy_(maximum(sum, t)); break;
  default: ACTORCH_INTERNAL_ASSERT(false, "unchecked reduce op");
  }
}

// parts[0] <- parts[0] (op) parts[1] (op) ... in index order; AVG is left a sum here.
void fold_into_first(std::vector<tensor>& parts, reduce_op op) {
  for (size_t k = 1; k < parts.size(); ++k)
    combine(parts[0], parts[k], op);
}

// parts[0] /= divisor when `divide`, then every other part <- parts[0].
void spread_first(std::vector<tensor>& parts, bool divide, int64_t divisor) {
  no_grad guard;
  if (divide)
    parts[0].div_(divisor);
  for (size_t k = 1; k < parts.size(); ++k)
    parts[k].copy_(parts[0]);
}

template <class T>
void sum_into_all_contiguous(const std::vector<tensor>& parts, bool average, T divisor) {
  constexpr int64_t kChunk = 8192; // elements: a chunk of every part stays in cache
  std::vector<T*> p;
  for (const tensor& t : parts)
    p.push_back(t.data_ptr<T>());
  const int64_t n = parts[0].numel();
  T* out = p[0];
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    for (size_t k = 1; k < p.size(); ++k) {
      const T* in = p[k];
      for (int64_t i = b; i < e; ++i)
        out[i] += in[i];
    }
    if (average)
      for (int64_t i = b; i < e; ++i)
        out[i] /= divisor;
    for (size_t k = 1; k < p.size(); ++k)
      std::copy(out + b, out + e, p[k] + b);
  }
}

// Every part <- the reduction of all parts (in index order; AVG divides by `divisor`).
void reduce_into_all(std::vector<tensor>& parts, reduce_op op, int64_t divisor) {
  no_grad guard;
  const bool plain_sum = op == reduce_op::sum || op == reduce_op::avg;
  const bool contiguous = std::all_of(parts.begin(), parts.end(), [](const tensor& t) {
    return t.is_contiguous() && t.device().is_cpu();
  });
  if (plain_sum && contiguous && parts[0].dtype() == dtype::float32) {
    sum_into_all_contiguous<float>(parts, op == reduce_op::avg, float(divisor));
    return;
  }
  if (plain_sum && contiguous && parts[0].dtype() == dtype::float64) {
    sum_into_all_contiguous<double>(parts, op == reduce_op::avg, double(divisor));
    return;
  }
  fold_into_first(parts, op);
  spread_first(parts, op == reduce_op::avg, divisor);
}

std::string describe_list(reduce_op op, const std::vector<tensor>& ts) {
  std::string d = std::string(reduce_op_name(op)) + " over ";
  for (size_t j = 0; j < ts.size(); ++j)
    d += (j > 0 ? ", " : "") + std::string(dtype_name(ts[j].dtype())) + " " +
         shape_str(ts[j].sizes());
  return ts.empty() ? d + "no tensors" : d;
}

bool same_layout(const std::vector<tensor>& a, const std::vector<tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t j = 0; j < a.size(); ++j)
    if (a[j].sizes() != b[j].sizes() || a[j].dtype() != b[j].dtype())
      return false;
  return true;
}

} // namespace

work local_replicas::state::all_reduce(int local, std::vector<tensor> ts, reduce_op op) {
  for (const tensor& t : ts)
    ACTORCH_CHECK(t.defined(), "all_reduce across replicas: replica ", local,
                  " passed an undefined tensor");
  check_local_op(op);
  ACTORCH_CHECK(ts.size() == 1 || exchange->num_processes() == 1,
                "all_reduce across replicas: several tensors at once cross processes as one "
                "flat tensor (replica_group::all_reduce_coalesced)");
  if (world() == 1) // its tensors are the reduction: nothing to meet, nothing to wait for
    return work::completed(std::move(ts));
  std::vector<cuda::event> written; // before taking a seq: a failure here leaves no entry
  record_written(ts, written);
  std::shared_ptr<entry> e;
  uint64_t seq = 0;
  {
    std::lock_guard lock(mu);
    if (aborted)
      return work::failed(aborted);
    seq = next_seq.at(size_t(local))++;
    auto& slot = pending[seq];
    if (!slot) {
      slot = std::make_shared<entry>();
      slot->parts.resize(size_t(num_local));
      slot->done.resize(size_t(num_local));
    }
    e = slot;
  }
  bool last = false;
  {
    std::lock_guard lock(e->mu);
    if (e->failed)
      return e->done[size_t(local)];
    if (e->arrived == 0) {
      e->first = local;
      e->op = op;
    }
    const std::vector<tensor>& shape = e->arrived > 0 ? e->parts[size_t(e->first)] : ts;
    if (!same_layout(shape, ts) || e->op != op) {
      auto err = std::make_exception_ptr(error(
          detail::concat("all_reduce across replicas: collective ", seq,
                         " does not match: the other replicas passed ", describe_list(e->op, shape),
                         " but replica ", local, " passed ", describe_list(op, ts),
                         " (every replica must issue the same collectives in the same order)")));
      e->failed = true;
      for (const work& w : e->done)
        w.mark_failed(err);
      std::rethrow_exception(err);
    }
    e->written.insert(e->written.end(), written.begin(), written.end());
    e->parts[size_t(local)] = std::move(ts);
    last = ++e->arrived == num_local;
    e->submitted = last;
  }
  if (!last)
    return e->done[size_t(local)];
  {
    std::lock_guard lock(mu);
    pending.erase(seq);
  }
  const int n = world();
  auto complete = [e] {
    for (size_t k = 0; k < e->done.size(); ++k)
      e->done[k].mark_completed(e->parts[k]);
  };
  auto fail = [e](std::exception_ptr err) {
    for (const work& w : e->done)
      w.mark_failed(err);
  };
  if (exchange->num_processes() == 1) {
    try {
      wait_for(e->written);
      std::vector<tensor> all; // every part, whose GPUs are settled once
      for (size_t j = 0; j < e->parts[0].size(); ++j) {
        std::vector<tensor> column;
        for (const auto& p : e->parts)
          column.push_back(p[j]);
        reduce_into_all(column, op, n);
        all.insert(all.end(), column.begin(), column.end());
      }
      settle(all);
    } catch (...) {
      fail(std::current_exception());
      return e->done[size_t(local)];
    }
    complete();
    return e->done[size_t(local)];
  }
  std::vector<tensor> column;
  for (const auto& p : e->parts)
    column.push_back(p[0]);
  try {
    wait_for(e->written);
    fold_into_first(column, op);
    settle(column);
  } catch (...) {
    fail(std::current_exception());
    return e->done[size_t(local)];
  }
  // With one replica per process the exchange's own AVG divides by the world (inside its
  // reduction, Note [Shared-memory all-reduce]); with more, the division waits for the sum.
  const bool divide_after = op == reduce_op::avg && num_local > 1;
  const reduce_op cross = divide_after ? reduce_op::sum : op;
  exchange->submit(seq, column[0], cross,
                   [column, n, divide_after, complete, fail](std::exception_ptr err) mutable {
                     if (err) {
                       fail(err);
                       return;
                     }
                     try {
                       spread_first(column, divide_after, n);
                       settle(column);
                     } catch (...) {
                       fail(std::current_exception());
                       return;
                     }
                     complete();
                   });
  return e->done[size_t(local)];
}

namespace {

class local_replica final : public replica_group {
public:
  local_replica(std::shared_ptr<local_replicas::state> s, int local)
      : state_(std::move(s)), local_(local) {}
  int rank() const override {
    return state_->exchange->process_rank() * state_->num_local + local_;
  }
  int size() const override { return state_->world(); }
  device collective_device() const override { return state_->devices[size_t(local_)]; }
  work all_reduce(const tensor& t, reduce_op op) override {
    return state_->all_reduce(local_, {t}, op);
  }
  work all_reduce_coalesced(std::vector<tensor> ts, reduce_op op) override {
    if (!reduces_in_place())
      return replica_group::all_reduce_coalesced(std::move(ts), op);
    return state_->all_reduce(local_, std::move(ts), op);
  }
  bool reduces_in_place() const override { return state_->exchange->num_processes() == 1; }
  // Replica 0's tensor is the one the exchange reduces across processes (Note [Local
  // reduction]), so only its buffers come from the process group.
  tensor new_buffer(int64_t numel, dtype dt) override {
    if (local_ == 0 && state_->exchange->num_processes() > 1)
      if (tensor t = state_->exchange->empty_shared(numel, dt); t.defined())
        return t;
    return replica_group::new_buffer(numel, dt);
  }

private:
  std::shared_ptr<local_replicas::state> state_;
  int local_;
};

} // namespace

local_replicas::local_replicas(int num_local, std::shared_ptr<process_exchange> exchange,
                               std::vector<device> devices)
    : state_(std::make_shared<state>()) {
  ACTORCH_CHECK(num_local >= 1, "local_replicas: num_local must be at least 1 but got ", num_local);
  ACTORCH_CHECK(exchange != nullptr, "local_replicas: the process exchange is null");
  if (devices.empty())
    devices.assign(size_t(num_local), kCPU);
  ACTORCH_CHECK(devices.size() == size_t(num_local), "local_replicas: ", num_local,
                " replicas but ", devices.size(), " devices");
  ACTORCH_CHECK(exchange->num_processes() == 1 || devices[0] == exchange->collective_device(),
                "local_replicas: replica 0 is on ", devices[0],
                " but the process group's collectives take tensors on ",
                exchange->collective_device(), " (its sum crosses processes from there)");
  state_->num_local = num_local;
  state_->exchange = std::move(exchange);
  state_->devices = std::move(devices);
  state_->next_seq.assign(size_t(num_local), 0);
}

local_replicas::~local_replicas() = default;

int local_replicas::num_local() const {
  return state_->num_local;
}

std::shared_ptr<replica_group> local_replicas::replica(int i) {
  ACTORCH_CHECK(i >= 0 && i < state_->num_local, "local_replicas: replica ", i,
                " out of range [0, ", state_->num_local, ")");
  return std::make_shared<local_replica>(state_, i);
}

void local_replicas::abort(std::exception_ptr e) {
  ACTORCH_CHECK(e != nullptr, "local_replicas::abort: the error is null");
  std::lock_guard lock(state_->mu);
  if (!state_->aborted)
    state_->aborted = e;
  for (auto& [seq, entry] : state_->pending) {
    std::lock_guard entry_lock(entry->mu);
    if (entry->submitted || entry->failed)
      continue;
    entry->failed = true;
    for (const work& w : entry->done)
      w.mark_failed(state_->aborted);
  }
  state_->pending.clear();
}

} // namespace actorch::dist
