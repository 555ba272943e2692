// replica_group over a process group, and the shared-memory level of trainer threads in one
// process (see Note [Local reduction]).
#include "comm/ddp/replica_group.hpp"

#include <map>
#include <mutex>

#include "base/error.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

namespace {

class process_group_replicas final : public replica_group {
public:
  explicit process_group_replicas(std::shared_ptr<process_group> pg) : pg_(std::move(pg)) {
    ACTORCH_CHECK(pg_ != nullptr, "process_replicas: the process group is null");
    ACTORCH_CHECK(pg_->rank() >= 0, "process_replicas: this process is not a member of the group");
  }
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }
  work all_reduce(const tensor& t, reduce_op op) override {
    tensor x = t;
    work out;
    pg_->all_reduce(x, op).then([out, x](const work& w) {
      if (auto e = w.exception())
        out.mark_failed(e);
      else
        out.mark_completed({x});
    });
    return out;
  }

private:
  std::shared_ptr<process_group> pg_;
};

} // namespace

std::shared_ptr<replica_group> process_replicas(std::shared_ptr<process_group> pg) {
  return std::make_shared<process_group_replicas>(std::move(pg));
}

void broadcast_from_rank0(replica_group& g, std::vector<tensor> ts) {
  // A sum where every rank but 0 contributes zeros: x + 0 is exact, so rank 0's values arrive
  // bit for bit. It costs a reduction instead of a copy, which is fine for construction-time
  // and buffer broadcasts. The tensors travel flattened, one collective per dtype (in order of
  // first appearance, the same on every replica).
  std::vector<dtype> order;
  std::map<dtype, std::vector<tensor*>> by_dtype;
  for (tensor& t : ts) {
    ACTORCH_CHECK(t.defined(), "broadcast_from_rank0: an undefined tensor");
    auto [it, inserted] = by_dtype.try_emplace(t.dtype());
    if (inserted)
      order.push_back(t.dtype());
    it->second.push_back(&t);
  }
  no_grad guard;
  for (dtype dt : order) {
    const auto& group = by_dtype.at(dt);
    int64_t numel = 0;
    for (const tensor* t : group)
      numel += t->numel();
    tensor flat = zeros({numel}, {.dtype = dt});
    if (g.rank() == 0) {
      int64_t offset = 0;
      for (const tensor* t : group) {
        flat.narrow(0, offset, t->numel()).view(t->sizes()).copy_(*t);
        offset += t->numel();
      }
    }
    work w = g.all_reduce(flat, reduce_op::sum);
    w.wait();
    const tensor sum = w.result().at(0);
    int64_t offset = 0;
    for (tensor* t : group) {
      t->copy_(sum.narrow(0, offset, t->numel()).view(t->sizes()));
      offset += t->numel();
    }
  }
}

tensor all_gather_rows(replica_group& g, const tensor& row, int64_t pad) {
  ACTORCH_CHECK(row.dim() == 1 && row.dtype() == dtype::int64,
                "all_gather_rows: expected a 1-D int64 row but got ", dtype_name(row.dtype()),
                " of shape ", shape_str(row.sizes()));
  tensor len = full({1}, row.numel(), {.dtype = dtype::int64});
  work lw = g.all_reduce(len, reduce_op::max);
  lw.wait();
  const int64_t width = lw.result().at(0).item<int64_t>();
  // Each rank writes its row, shifted by -pad so that the untouched slots of other ranks sum
  // to zero, and pad is added back after the sum.
  tensor rows = zeros({g.size(), width}, {.dtype = dtype::int64});
  rows.select(0, g.rank()).narrow(0, 0, row.numel()).copy_(row);
  rows.select(0, g.rank()).sub_(pad);
  work w = g.all_reduce(rows, reduce_op::sum);
  w.wait();
  return w.result().at(0).add(pad);
}

// Note [Local reduction]
// The replicas of one process are trainer threads sharing memory. Their n-th collectives
// meet in one entry: the first arrival copies its tensor into a sum buffer, each later arrival
// adds its tensor into that buffer on its own thread under the entry's lock, and the last
// hands the sum to the process exchange. So the local level costs one pass per replica over
// its tensor, spread over the replicas' threads, and never copies through a socket. The
// exchange reduces across processes (in seq order, which keeps the collectives matched) and
// completes the entry's work, which every local replica waits on; they then read the shared
// result.
// The sum buffer is not any replica's own tensor: a replica that woke first could otherwise
// start its next iteration and overwrite its tensor while a slower one still reads the result.
// Buffers come from a pool and are reused only once nobody holds the result any more (the
// pool holds the only reference to the tensor and its storage).
struct local_replicas::state {
  struct entry {
    std::mutex mu;
    tensor sum;
    reduce_op op = reduce_op::sum;
    int arrived = 0;
    bool submitted = false; // handed to the exchange, which completes `done`
    bool failed = false;
    work done;
  };

  std::mutex mu;
  int num_local = 0;
  std::shared_ptr<process_exchange> exchange;
  std::vector<uint64_t> next_seq;
  std::map<uint64_t, std::shared_ptr<entry>> pending;
  std::exception_ptr aborted;
  std::vector<tensor> pool; // sum buffers; see Note [Local reduction]

  // A buffer shaped like t, unused by anyone (under mu).
  tensor acquire(const tensor& t) {
    for (const tensor& b : pool)
      if (b.dtype() == t.dtype() && b.numel() == t.numel() && b.impl_ptr().use_count() == 1 &&
          b.storage().use_count() == 1)
        return b.view(t.sizes());
    pool.push_back(empty({t.numel()}, {.dtype = t.dtype()}));
    return pool.back().view(t.sizes());
  }

  int world() const { return num_local * exchange->num_processes(); }

  work all_reduce(int local, const tensor& t, reduce_op op);
};

namespace {

void check_local_op(reduce_op op) {
  ACTORCH_CHECK(op == reduce_op::sum || op == reduce_op::avg || op == reduce_op::min ||
                    op == reduce_op::max,
                "all_reduce across replicas: ", reduce_op_name(op),
                " is not supported (SUM, AVG, MIN and MAX are)");
}

// sum <- sum (op) t.
void combine(tensor& sum, const tensor& t, reduce_op op) {
  no_grad guard;
  switch (op) {
  case reduce_op::sum:
  case reduce_op::avg: sum.add_(t); break;
  case reduce_op::min: sum.copy_(minimum(sum, t)); break;
  case reduce_op::max: sum.copy_(maximum(sum, t)); break;
  default: ACTORCH_INTERNAL_ASSERT(false, "unchecked reduce op");
  }
}

} // namespace

work local_replicas::state::all_reduce(int local, const tensor& t, reduce_op op) {
  ACTORCH_CHECK(t.defined(), "all_reduce across replicas: replica ", local,
                " passed an undefined tensor");
  check_local_op(op);
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
      slot->sum = acquire(t);
    }
    e = slot;
  }
  bool last = false;
  {
    std::lock_guard lock(e->mu);
    if (e->failed)
      return e->done;
    // The buffer was shaped by whichever replica created the entry.
    if (e->sum.sizes() != t.sizes() || e->sum.dtype() != t.dtype() ||
        (e->arrived > 0 && e->op != op)) {
      auto err = std::make_exception_ptr(error(detail::concat(
          "all_reduce across replicas: collective ", seq,
          " does not match: the other replicas "
          "passed ",
          e->arrived > 0 ? reduce_op_name(e->op) : "it", " over ", dtype_name(e->sum.dtype()), " ",
          shape_str(e->sum.sizes()), " but replica ", local, " passed ", reduce_op_name(op),
          " over ", dtype_name(t.dtype()), " ", shape_str(t.sizes()),
          " (every replica must issue the same collectives in the same order)")));
      e->failed = true;
      e->done.mark_failed(err);
      std::rethrow_exception(err);
    }
    if (e->arrived == 0) {
      no_grad guard;
      e->sum.copy_(t);
      e->op = op;
    } else {
      combine(e->sum, t, op);
    }
    last = ++e->arrived == num_local;
    e->submitted = last;
  }
  if (!last)
    return e->done;
  {
    std::lock_guard lock(mu);
    pending.erase(seq);
  }
  const int n = world();
  const reduce_op cross = op == reduce_op::avg ? reduce_op::sum : op;
  exchange->submit(seq, e->sum, cross, [e, n](std::exception_ptr err) {
    if (err) {
      e->done.mark_failed(err);
      return;
    }
    if (e->op == reduce_op::avg) {
      no_grad guard;
      e->sum.div_(n);
    }
    e->done.mark_completed({e->sum});
  });
  return e->done;
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
  work all_reduce(const tensor& t, reduce_op op) override {
    return state_->all_reduce(local_, t, op);
  }

private:
  std::shared_ptr<local_replicas::state> state_;
  int local_;
};

} // namespace

local_replicas::local_replicas(int num_local, std::shared_ptr<process_exchange> exchange)
    : state_(std::make_shared<state>()) {
  ACTORCH_CHECK(num_local >= 1, "local_replicas: num_local must be at least 1 but got ", num_local);
  ACTORCH_CHECK(exchange != nullptr, "local_replicas: the process exchange is null");
  state_->num_local = num_local;
  state_->exchange = std::move(exchange);
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
    entry->done.mark_failed(state_->aborted);
  }
  state_->pending.clear();
}

} // namespace actorch::dist
