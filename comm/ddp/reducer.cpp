// The gradient reducer behind distributed_data_parallel (reducer.hpp).
#include "comm/ddp/reducer.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <unordered_set>

#include "base/error.hpp"
#include "comm/collective_tag.hpp"
#include "comm/ddp/adaptive_buckets.hpp"
#include "comm/ddp/bucket_layout.hpp"
#include "core/autograd/engine.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

std::string devices_str(const std::set<device>& devices) {
  std::string out = "{";
  for (const device& d : devices)
    out += (out.size() > 1 ? ", " : "") + d.str();
  return out + "}";
}

namespace {

// Whether `g` is exactly the bucket slot `slot` (gradient_as_bucket_view's gradients).
bool is_view_of(const tensor& g, const tensor& slot) {
  return g.data_ptr() == slot.data_ptr() && g.sizes() == slot.sizes() &&
         g.strides() == slot.strides() && g.dtype() == slot.dtype();
}

} // namespace

// Note [In-place gradients]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Where the replicas share memory and nothing crosses processes (trainer actors of one
// process: replica_group::reduces_in_place), a bucket is only a group of parameters launched
// together: all_reduce_coalesced reduces each parameter's .grad where backward left it, and the
// average lands in every replica's .grad. No copy into a bucket, none out of it. A parameter
// without a gradient contributes a zeros tensor, which becomes its gradient if some replica
// used it. Elsewhere a bucket is a flat buffer the gradients are copied into (or are views of,
// with gradient_as_bucket_view), since a process group reduces one contiguous tensor.

// Note [Buckets per device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A module whose parameters lie on several devices (torch's multi-device module, as the seeds'
// demo_model_parallel: half the layers on one GPU, half on another) gets buckets per device,
// as torch's do: a bucket holds parameters of one dtype on one device. The process group
// reduces on its collective device (NCCL's is the process's own GPU), so a bucket whose
// parameters live elsewhere keeps its flat buffer there: the gradients are copied across on
// the way in and the averages back on the way out (gradient_as_bucket_view makes views only
// of buckets on the parameters' own device). torch's NCCL group keeps a communicator per
// device instead, which saves the copies; none of our machines has two GPUs to measure it.

// Note [Bucket order]
// ~~~~~~~~~~~~~~~~~~~
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
// The reducer's parts: the buckets (bucket_layout), the adaptive choice of their boundaries
// (adaptive_buckets), the comm hook, and below, the iteration: which parameters are ready, in
// what order, and which bucket launches next.
struct reducer::impl : std::enable_shared_from_this<reducer::impl> {
  // What one iteration has seen so far (reset by prepare).
  struct iteration_state {
    bool armed = false;       // prepare_for_backward ran; hooks synchronise
    bool in_backward = false; // a hook fired and the final callback is queued
    size_t next_launch = 0;   // the next bucket to launch (Note [Bucket order])
    std::vector<char> marked;
    std::vector<char> locally_used;
    std::vector<size_t> unused; // find_unused_parameters: not reached by the graph
    std::shared_ptr<adaptive_buckets::timing> measuring; // this iteration's, or null
  };

  // Bucket events for the trace and tests; called on the backward thread (ready) and on the
  // completing thread (reduced).
  struct observer_slot {
    std::mutex mu;
    std::function<void(const bucket_event&)> fn;
    void notify(bucket_event::kind_t kind, int64_t it, size_t b, size_t bytes) {
      std::lock_guard lock(mu);
      if (fn)
        fn({kind, it, b, bytes, std::chrono::steady_clock::now()});
    }
  };

  std::vector<tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<replica_group> group;
  reducer_options opts;
  bucket_layout layout;
  adaptive_buckets adaptive;
  comm_hook hook; // register_comm_hook's, or empty: the built-in average
  observer_slot observer;

  int64_t iteration = 0;
  iteration_state now;
  std::vector<size_t> ready_order; // the first iteration's, for the rebuild
  std::vector<size_t> agreed;      // the rebuilt buckets' parameter order
  bool rebuilt = false;
  uint64_t pointed = 0; // the layout generation the gradient destinations point into

  impl(std::vector<tensor> ps, std::vector<std::string> ns, std::shared_ptr<replica_group> g,
       reducer_options o)
      : params(std::move(ps)), names(std::move(ns)), group(std::move(g)), opts(o),
        layout(params, group, group->reduces_in_place()), adaptive(params, *group, cap()) {
    std::vector<size_t> reverse(params.size());
    for (size_t k = 0; k < reverse.size(); ++k)
      reverse[k] = reverse.size() - 1 - k;
    layout.build(compute_bucket_assignment(params, reverse, first_cap(), cap()));
  }

  ~impl() { point_gradients_at_buckets(false); }

  // gradient_as_bucket_view: backward writes each gradient into its bucket slot in the first
  // place (Note [Gradient destinations]) rather than into memory that mark_ready copies from,
  // where the bucket is flat and on the parameter's device. `on` false removes the
  // destinations this reducer set.
  void point_gradients_at_buckets(bool on) {
    if (!opts.gradient_as_bucket_view)
      return;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [b, slot] = layout.where(i);
      const bucket& bk = layout.buckets()[b];
      if (!bk.flat.defined() || bk.flat.device() != params[i].device())
        continue;
      if (on)
        autograd::set_grad_destination(params[i], layout.slot_view(b, slot, bk.flat));
      else if (const tensor d = autograd::grad_destination(params[i]);
               d.defined() && d.storage() == bk.flat.storage())
        autograd::set_grad_destination(params[i], tensor());
    }
  }

  size_t cap() const { return size_t(opts.bucket_cap_mb * 1024 * 1024); }
  size_t first_cap() const { return size_t(opts.first_bucket_cap_mb * 1024 * 1024); }

  void rebuild_from_rank0() {
    collective_tag tag("DDP bucket rebuild");
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
    agreed.assign(order.size(), 0);
    for (size_t k = 0; k < agreed.size(); ++k)
      agreed[k] = size_t(q[k]);
    layout.build(compute_bucket_assignment(params, agreed, first_cap(), cap()));
    rebuilt = true;
  }

  void prepare(const std::vector<tensor>& outputs) {
    ACTORCH_CHECK(!now.in_backward,
                  "DistributedDataParallel: the previous iteration's reduction has not finished "
                  "(a backward pass failed or is still running)");
    if (iteration == 1 && !rebuilt)
      rebuild_from_rank0();
    now = iteration_state{};
    if (opts.adaptive_buckets && !hook && rebuilt)
      now.measuring = adaptive.begin_iteration(iteration, layout, agreed);
    if (pointed != layout.generation()) { // new buckets since the last iteration
      point_gradients_at_buckets(true);
      pointed = layout.generation();
    }
    now.armed = true;
    now.marked.assign(params.size(), 0);
    now.locally_used.assign(params.size(), 0);
    for (auto& bk : layout.buckets())
      bk.pending = bk.params.size();
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
        now.unused.push_back(i);
  }

  void on_gradient(size_t i) {
    if (!now.armed)
      return; // no_sync, or a backward DDP's forward did not prepare: accumulate locally
    if (!now.in_backward) {
      now.in_backward = true;
      autograd::queue_callback([self = shared_from_this()] { self->finalize(); });
      for (size_t u : now.unused)
        mark_ready(u, false);
    }
    mark_ready(i, true);
  }

  void mark_ready(size_t i, bool used) {
    ACTORCH_CHECK(!now.marked[i], "DistributedDataParallel: parameter '", names[i],
                  "' was marked ready twice in one iteration: it got a gradient from a second "
                  "backward pass (or after find_unused_parameters counted it unused) before the "
                  "reduction finished");
    now.marked[i] = 1;
    now.locally_used[i] = used ? 1 : 0;
    if (iteration == 0)
      ready_order.push_back(i);
    if (now.measuring)
      now.measuring->ready[i] = adaptive_buckets::clock::now();
    const auto [b, slot] = layout.where(i);
    bucket& bk = layout.buckets()[b];
    if (layout.in_place()) {
      // The gradient itself takes part (Note [In-place gradients]); a parameter without one
      // contributes zeros, which become its gradient if another replica used it.
      no_grad guard;
      const tensor g = params[i].grad();
      bk.reduced_in_place[slot] = used && g.defined() ? g : zeros_like(params[i]);
    } else {
      no_grad guard;
      tensor dst = layout.slot_view(b, slot, bk.flat);
      const tensor g = params[i].grad();
      if (!used || !g.defined())
        dst.zero_();
      else if (!is_view_of(g, dst)) // gradient_as_bucket_view: already in place
        dst.copy_(g);
    }
    if (--bk.pending == 0)
      launch_ready();
  }

  void launch_ready() {
    auto& buckets = layout.buckets();
    while (now.next_launch < buckets.size() && buckets[now.next_launch].pending == 0) {
      const size_t b = now.next_launch++;
      const size_t bytes = buckets[b].bytes;
      observer.notify(bucket_event::ready, iteration, b, bytes);
      // AVG: the division happens once per bucket where the sum completes (for trainer
      // threads, once per process), so copying the result back is a plain copy.
      if (now.measuring)
        now.measuring->launch[b] = adaptive_buckets::clock::now();
      work w;
      collective_tag tag("DDP bucket " + std::to_string(b));
      if (hook) {
        grad_bucket gb = layout.hooked(b);
        w = hook(gb);
      } else {
        w = layout.in_place()
                ? group->all_reduce_coalesced(buckets[b].reduced_in_place, reduce_op::avg)
                : group->all_reduce(buckets[b].flat, reduce_op::avg);
      }
      std::weak_ptr<impl> weak = weak_from_this();
      const int64_t it = iteration;
      // The timing slot is written here and read after finalize waited for this work.
      buckets[b].reduced = w.then([weak, b, it, bytes, t = now.measuring](const work& done) {
        if (t)
          t->reduced[b] = adaptive_buckets::clock::now();
        if (auto self = weak.lock(); self && !done.exception())
          self->observer.notify(bucket_event::reduced, it, b, bytes);
      });
    }
  }

  void finalize() {
    now.in_backward = false;
    now.armed = false;
    const int64_t it = iteration++;
    auto& buckets = layout.buckets();
    if (now.next_launch < buckets.size()) {
      std::string missing;
      for (size_t i = 0; i < params.size(); ++i)
        if (!now.marked[i])
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
      collective_tag tag("DDP unused parameters");
      tensor used = empty({int64_t(params.size())}, {.dtype = dtype::int32});
      auto* u = used.data_ptr<int32_t>();
      for (size_t i = 0; i < params.size(); ++i)
        u[i] = now.locally_used[i];
      work w = group->all_reduce(used.to(group->collective_device()), reduce_op::sum);
      w.wait();
      used_anywhere = w.result().at(0).cpu();
    }
    no_grad guard;
    for (size_t b = 0; b < buckets.size(); ++b) {
      bucket& bk = buckets[b];
      // The average is now in bk.flat (an in-place all-reduce): over NCCL for this thread's
      // stream, the host going on at once, except while the iteration is timed.
      if (now.measuring)
        bk.reduced.synchronize();
      else
        bk.reduced.wait();
      if (hook) { // the hook's result is the average, in the buffer or beside it
        const auto& result = bk.reduced.result();
        ACTORCH_CHECK(!result.empty() && result[0].defined() &&
                          result[0].numel() == bk.flat.numel(),
                      "DistributedDataParallel: the communication hook's result for bucket ", b,
                      " must be a tensor of the bucket's ", bk.flat.numel(), " elements");
        if (!result[0].is_same(bk.flat))
          bk.flat.copy_(result[0].reshape(bk.flat.sizes()));
      }
      for (size_t slot = 0; slot < bk.params.size(); ++slot) {
        const size_t i = bk.params[slot];
        if (used_anywhere.defined() && used_anywhere.data_ptr<int32_t>()[i] == 0)
          continue; // no replica used it: its gradient stays as it was, as in torch
        if (layout.in_place()) {
          const tensor& avg = bk.reduced_in_place[slot];
          if (!params[i].grad().defined() || !params[i].grad().is_same(avg))
            params[i].set_grad(avg);
          continue;
        }
        const tensor avg = layout.slot_view(b, slot, bk.flat);
        tensor g = params[i].grad();
        const bool here = avg.device() == params[i].device(); // Note [Buckets per device]
        if (opts.gradient_as_bucket_view && here)
          params[i].set_grad(avg);
        else if (g.defined())
          g.copy_(avg);
        else
          params[i].set_grad(here ? avg.clone() : avg.to(params[i].device()));
      }
      bk.reduced = work();
      std::fill(bk.reduced_in_place.begin(), bk.reduced_in_place.end(), tensor());
    }
    if (now.measuring)
      now.measuring->end = adaptive_buckets::clock::now();
  }
};

reducer::reducer(std::vector<tensor> params, std::vector<std::string> names,
                 std::shared_ptr<replica_group> replicas, reducer_options opts) {
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
  }
  std::set<device> devices;
  for (const tensor& p : params)
    devices.insert(p.device());
  if (devices.size() == 1) {
    ACTORCH_CHECK(params[0].device() == replicas->collective_device(),
                  "DistributedDataParallel: the parameters are on ", params[0].device(),
                  " but the process group's collectives take tensors on ",
                  replicas->collective_device(),
                  " (CUDA parameters need the nccl backend, CPU ones gloo)");
  } else {
    ACTORCH_CHECK(!replicas->reduces_in_place(),
                  "DistributedDataParallel: a module on several devices (", devices_str(devices),
                  ") needs one replica per process; trainer threads sharing a process reduce "
                  "their gradients in place and take single-device modules only");
  }
  impl_ = std::make_shared<impl>(std::move(params), std::move(names), std::move(replicas), opts);
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
  return impl_->layout.assignment();
}

bool reducer::buckets_rebuilt() const {
  return impl_->rebuilt;
}

bool reducer::buckets_adapted() const {
  return impl_->opts.adaptive_buckets && impl_->adaptive.settled();
}

void reducer::shadow_iteration() {
  impl& r = *impl_;
  r.prepare({}); // the iteration's own collectives (rebuild, timings) as on the others
  r.now.in_backward = true;
  for (const auto& bk : r.layout.buckets()) // bucket by bucket, so each launches in order
    for (size_t i : bk.params)
      r.mark_ready(i, false);
  r.finalize();
}

void reducer::register_comm_hook(comm_hook hook) {
  ACTORCH_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  ACTORCH_CHECK(!impl_->hook, "register_comm_hook can only be called once");
  ACTORCH_CHECK(impl_->iteration == 0 && !impl_->now.armed,
                "register_comm_hook must be called before the first forward and backward");
  impl_->hook = std::move(hook);
  impl_->layout.make_flat(); // a hook reduces flat buckets
}

void reducer::set_observer(std::function<void(const bucket_event&)> fn) {
  std::lock_guard lock(impl_->observer.mu);
  impl_->observer.fn = std::move(fn);
}

} // namespace actorch::dist
