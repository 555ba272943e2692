// The gradient reducer behind distributed_data_parallel (reducer.hpp).
#include "comm/ddp/reducer.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_set>

#include "base/error.hpp"
#include "core/autograd/engine.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  struct open_bucket {
    std::vector<size_t> indices;
    size_t bytes = 0;
    size_t cap = 0;
  };
  std::map<dtype, open_bucket> open;
  std::vector<std::vector<size_t>> result;
  for (size_t i : order) {
    ACTORCH_CHECK(i < params.size(), "compute_bucket_assignment: index ", i, " out of range for ",
                  params.size(), " parameters");
    const tensor& p = params[i];
    auto [it, inserted] = open.try_emplace(p.dtype());
    open_bucket& b = it->second;
    if (inserted)
      b.cap = first_cap_bytes;
    b.indices.push_back(i);
    b.bytes += size_t(p.numel()) * element_size(p.dtype());
    if (b.bytes >= b.cap) {
      result.push_back(std::move(b.indices));
      b = open_bucket{{}, 0, cap_bytes};
    }
  }
  for (auto& [t, b] : open)
    if (!b.indices.empty())
      result.push_back(std::move(b.indices));
  return result;
}

// Note [Bucket order]
// Every replica must issue its collectives in the same order, or they pair the wrong buckets.
// Gradients become ready in an order that can differ between replicas (and between
// iterations), so a bucket is launched only when every bucket before it has been: bucket k's
// all-reduce starts at the moment both its own last gradient and bucket k-1's launch have
// happened. Parameters go into buckets in reverse registration order, which approximates the
// order backward produces them, so launches rarely wait. After the first iteration the buckets
// are rebuilt once from the order the hooks actually fired in, taken from rank 0 so that every
// replica gets the same assignment. The optimizer step waits only for the buckets: backward's
// final callback (autograd::queue_callback) waits for each bucket's work and copies the
// averaged gradients back.
struct reducer::impl : std::enable_shared_from_this<reducer::impl> {
  struct bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets; // element offset of each parameter in `flat`
    tensor flat;
    size_t pending = 0; // parameters not yet ready this iteration
    work reduced;
  };

  std::vector<tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<replica_group> group;
  reducer_options opts;

  std::vector<bucket> buckets;
  std::vector<std::pair<size_t, size_t>> where; // parameter -> (bucket, slot)
  std::vector<std::vector<size_t>> assignment;
  bool rebuilt = false;

  // The current iteration.
  int64_t iteration = 0;
  bool armed = false;       // prepare_for_backward ran; hooks synchronise
  bool in_backward = false; // a hook fired and the final callback is queued
  size_t next_launch = 0;
  std::vector<char> marked;
  std::vector<char> locally_used;
  std::vector<size_t> unused;      // find_unused_parameters: not reached by the graph
  std::vector<size_t> ready_order; // first iteration, for the rebuild

  std::mutex observer_mu;
  std::function<void(const bucket_event&)> observer;

  // Called on the backward thread (ready) and on the completing thread (reduced).
  void notify(bucket_event::kind_t kind, int64_t it, size_t b, size_t bytes) {
    std::lock_guard lock(observer_mu);
    if (observer)
      observer({kind, it, b, bytes, std::chrono::steady_clock::now()});
  }

  void build_buckets(std::vector<std::vector<size_t>> a) {
    assignment = std::move(a);
    buckets.clear();
    where.assign(params.size(), {0, 0});
    for (size_t b = 0; b < assignment.size(); ++b) {
      bucket bk;
      int64_t numel = 0;
      for (size_t slot = 0; slot < assignment[b].size(); ++slot) {
        const size_t i = assignment[b][slot];
        bk.params.push_back(i);
        bk.offsets.push_back(numel);
        numel += params[i].numel();
        where[i] = {b, slot};
      }
      bk.flat = zeros({numel}, {.dtype = params[assignment[b].front()].dtype()});
      buckets.push_back(std::move(bk));
    }
  }

  tensor slot_view(size_t b, size_t slot, const tensor& of) const {
    const bucket& bk = buckets[b];
    return of.narrow(0, bk.offsets[slot], params[bk.params[slot]].numel())
        .view(params[bk.params[slot]].sizes());
  }

  void rebuild_from_rank0() {
    // Rank 0's ready order (parameters never marked appended in reverse order, as the
    // initial assignment has them), broadcast so that every replica builds the same buckets.
    std::vector<size_t> order = ready_order;
    std::vector<char> seen(params.size(), 0);
    for (size_t i : order)
      seen[i] = 1;
    for (size_t i = params.size(); i-- > 0;)
      if (!seen[i])
        order.push_back(i);
    tensor t = empty({int64_t(order.size())}, {.dtype = dtype::int64});
    auto* p = t.data_ptr<int64_t>();
    for (size_t k = 0; k < order.size(); ++k)
      p[k] = int64_t(order[k]);
    broadcast_from_rank0(*group, {t});
    const auto* q = t.data_ptr<int64_t>();
    std::vector<size_t> agreed(order.size());
    for (size_t k = 0; k < agreed.size(); ++k)
      agreed[k] = size_t(q[k]);
    build_buckets(compute_bucket_assignment(params, agreed, first_cap(), cap()));
    rebuilt = true;
  }

  size_t cap() const { return size_t(opts.bucket_cap_mb * 1024 * 1024); }
  size_t first_cap() const { return size_t(opts.first_bucket_cap_mb * 1024 * 1024); }

  void prepare(const std::vector<tensor>& outputs) {
    ACTORCH_CHECK(!in_backward,
                  "DistributedDataParallel: the previous iteration's reduction has not finished "
                  "(a backward pass failed or is still running)");
    if (iteration == 1 && !rebuilt)
      rebuild_from_rank0();
    armed = true;
    next_launch = 0;
    marked.assign(params.size(), 0);
    locally_used.assign(params.size(), 0);
    for (auto& bk : buckets)
      bk.pending = bk.params.size();
    unused.clear();
    if (opts.find_unused_parameters)
      find_unused(outputs);
  }

  // The parameters whose accumulate_grad node the graph behind `outputs` does not reach.
  void find_unused(const std::vector<tensor>& outputs) {
    std::unordered_set<const node*> seen;
    std::vector<const node*> stack;
    for (const tensor& out : outputs) {
      const edge e = autograd::gradient_edge(out);
      if (e.fn && seen.insert(e.fn.get()).second)
        stack.push_back(e.fn.get());
    }
    while (!stack.empty()) {
      const node* n = stack.back();
      stack.pop_back();
      for (const edge& e : n->next_edges)
        if (e.fn && seen.insert(e.fn.get()).second)
          stack.push_back(e.fn.get());
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (!seen.contains(autograd::gradient_edge(params[i]).fn.get()))
        unused.push_back(i);
  }

  void on_gradient(size_t i) {
    if (!armed)
      return; // no_sync, or a backward DDP's forward did not prepare: accumulate locally
    if (!in_backward) {
      in_backward = true;
      autograd::queue_callback([self = shared_from_this()] { self->finalize(); });
      for (size_t u : unused)
        mark_ready(u, false);
    }
    mark_ready(i, true);
  }

  void mark_ready(size_t i, bool used) {
    ACTORCH_CHECK(!marked[i], "DistributedDataParallel: parameter '", names[i],
                  "' was marked ready twice in one iteration: it got a gradient from a second "
                  "backward pass (or after find_unused_parameters counted it unused) before the "
                  "reduction finished");
    marked[i] = 1;
    locally_used[i] = used ? 1 : 0;
    if (iteration == 0)
      ready_order.push_back(i);
    const auto [b, slot] = where[i];
    {
      no_grad guard;
      tensor dst = slot_view(b, slot, buckets[b].flat);
      const tensor g = params[i].grad();
      if (used && g.defined())
        dst.copy_(g);
      else
        dst.zero_();
    }
    if (--buckets[b].pending == 0)
      launch_ready();
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      const size_t b = next_launch++;
      const size_t bytes = buckets[b].flat.nbytes();
      notify(bucket_event::ready, iteration, b, bytes);
      // AVG: the division happens once per bucket where the sum completes (for trainer
      // threads, once per process), so copying the result back is a plain copy.
      work w = group->all_reduce(buckets[b].flat, reduce_op::avg);
      std::weak_ptr<impl> weak = weak_from_this();
      const int64_t it = iteration;
      buckets[b].reduced = w.then([weak, b, it, bytes](const work& done) {
        if (auto self = weak.lock(); self && !done.exception())
          self->notify(bucket_event::reduced, it, b, bytes);
      });
    }
  }

  void finalize() {
    in_backward = false;
    armed = false;
    const int64_t it = iteration++;
    if (next_launch < buckets.size()) {
      std::string missing;
      for (size_t i = 0; i < params.size(); ++i)
        if (!marked[i])
          missing += (missing.empty() ? "'" : ", '") + names[i] + "'";
      ACTORCH_FAIL("DistributedDataParallel: expected every parameter to get a gradient in "
                   "iteration ",
                   it, ", but these did not: ", missing,
                   ". If the forward pass does not use them, construct it with "
                   "find_unused_parameters = true; make sure every output that depends on "
                   "parameters takes part in the loss");
    }
    // With find_unused_parameters, which parameters any replica used: one more collective,
    // issued after the buckets on every replica.
    tensor used_anywhere;
    if (opts.find_unused_parameters) {
      tensor used = empty({int64_t(params.size())}, {.dtype = dtype::int32});
      auto* u = used.data_ptr<int32_t>();
      for (size_t i = 0; i < params.size(); ++i)
        u[i] = locally_used[i];
      work w = group->all_reduce(used, reduce_op::sum);
      w.wait();
      used_anywhere = w.result().at(0);
    }
    no_grad guard;
    for (size_t b = 0; b < buckets.size(); ++b) {
      bucket& bk = buckets[b];
      bk.reduced.wait();
      const tensor sum = bk.reduced.result().at(0);
      for (size_t slot = 0; slot < bk.params.size(); ++slot) {
        const size_t i = bk.params[slot];
        if (used_anywhere.defined() && used_anywhere.data_ptr<int32_t>()[i] == 0)
          continue; // no replica used it: its gradient stays as it was, as in torch
        const tensor avg = slot_view(b, slot, sum);
        tensor g = params[i].grad();
        if (g.defined())
          g.copy_(avg);
        else
          params[i].set_grad(avg.clone());
      }
      bk.reduced = work();
    }
  }
};

reducer::reducer(std::vector<tensor> params, std::vector<std::string> names,
                 std::shared_ptr<replica_group> replicas, reducer_options opts)
    : impl_(std::make_shared<impl>()) {
  ACTORCH_CHECK(replicas != nullptr, "DistributedDataParallel: the replica group is null");
  ACTORCH_CHECK(!params.empty(), "DistributedDataParallel: the module has no parameters");
  ACTORCH_CHECK(names.size() == params.size(), "reducer: ", params.size(), " parameters but ",
                names.size(), " names");
  ACTORCH_CHECK(opts.bucket_cap_mb > 0 && opts.first_bucket_cap_mb > 0,
                "DistributedDataParallel: bucket_cap_mb must be positive but got ",
                opts.bucket_cap_mb, " (first bucket ", opts.first_bucket_cap_mb, ")");
  for (size_t i = 0; i < params.size(); ++i) {
    ACTORCH_CHECK(params[i].is_leaf() && params[i].requires_grad(),
                  "DistributedDataParallel: parameter '", names[i],
                  "' must be a leaf that requires grad");
    ACTORCH_CHECK(params[i].device() == params[0].device(),
                  "DistributedDataParallel: parameters on several devices ('", names[0], "' on ",
                  params[0].device(), ", '", names[i], "' on ", params[i].device(), ")");
  }
  impl_->params = std::move(params);
  impl_->names = std::move(names);
  impl_->group = std::move(replicas);
  impl_->opts = opts;
  std::vector<size_t> reverse(impl_->params.size());
  for (size_t k = 0; k < reverse.size(); ++k)
    reverse[k] = reverse.size() - 1 - k;
  impl_->build_buckets(
      compute_bucket_assignment(impl_->params, reverse, impl_->first_cap(), impl_->cap()));
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    std::weak_ptr<impl> weak = impl_;
    impl_->params[i].register_post_accumulate_grad_hook([weak, i](const tensor&) {
      if (auto self = weak.lock())
        self->on_gradient(i);
    });
  }
}

reducer::~reducer() = default;

void reducer::prepare_for_backward(const std::vector<tensor>& outputs) {
  impl_->prepare(outputs);
}

const std::vector<std::vector<size_t>>& reducer::buckets() const {
  return impl_->assignment;
}

bool reducer::buckets_rebuilt() const {
  return impl_->rebuilt;
}

void reducer::set_observer(std::function<void(const bucket_event&)> fn) {
  std::lock_guard lock(impl_->observer_mu);
  impl_->observer = std::move(fn);
}

} // namespace actorch::dist
