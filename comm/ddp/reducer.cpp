// The gradient reducer behind distributed_data_parallel (reducer.hpp).
#include "comm/ddp/reducer.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "base/error.hpp"
#include "comm/collective_tag.hpp"
#include "core/autograd/engine.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"
#include "core/trace.hpp"

namespace actorch::dist {

std::string devices_str(const std::set<device>& devices) {
  std::string out = "{";
  for (const device& d : devices)
    out += (out.size() > 1 ? ", " : "") + d.str();
  return out + "}";
}

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<bucket_param>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  struct open_bucket {
    std::vector<size_t> indices;
    size_t bytes = 0;
    size_t cap = 0;
  };
  std::map<std::pair<dtype, device>, open_bucket> open;
  std::vector<std::vector<size_t>> result;
  for (size_t i : order) {
    ACTORCH_CHECK(i < params.size(), "compute_bucket_assignment: index ", i, " out of range for ",
                  params.size(), " parameters");
    const bucket_param& p = params[i];
    auto [it, inserted] = open.try_emplace({p.type, p.dev});
    open_bucket& b = it->second;
    if (inserted)
      b.cap = first_cap_bytes;
    b.indices.push_back(i);
    b.bytes += p.bytes;
    if (b.bytes >= b.cap) {
      result.push_back(std::move(b.indices));
      b = open_bucket{{}, 0, cap_bytes};
    }
  }
  for (auto& [key, b] : open)
    if (!b.indices.empty())
      result.push_back(std::move(b.indices));
  return result;
}

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  std::vector<bucket_param> described;
  for (const tensor& p : params)
    described.push_back({p.dtype(), p.device(), p.nbytes()});
  return compute_bucket_assignment(described, order, first_cap_bytes, cap_bytes);
}

std::vector<int64_t> choose_bucket_boundaries(const std::vector<double>& ready,
                                              const std::vector<size_t>& bytes,
                                              const std::vector<int>& kinds, size_t cap_bytes,
                                              double latency, double seconds_per_byte) {
  const size_t n = bytes.size();
  ACTORCH_CHECK(ready.size() == n && kinds.size() == n,
                "choose_bucket_boundaries: ready, bytes and kinds differ in length (", ready.size(),
                ", ", n, ", ", kinds.size(), ")");
  // best[j]: the earliest end of the all-reduce of a bucket ending at position j (exclusive),
  // over every split of positions [0, j); from[j]: where that last bucket starts.
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(n + 1, inf);
  std::vector<size_t> from(n + 1, 0);
  best[0] = 0;
  double ready_max = 0; // a bucket launches only after every earlier bucket did
  for (size_t j = 1; j <= n; ++j) {
    ready_max = std::max(ready_max, ready[j - 1]);
    size_t sum = 0;
    for (size_t i = j; i-- > 0;) {
      if (kinds[i] != kinds[j - 1])
        break;
      sum += bytes[i];
      if (sum > cap_bytes && i + 1 < j)
        break;
      const double end = std::max(best[i], ready_max) + latency + double(sum) * seconds_per_byte;
      if (end < best[j]) {
        best[j] = end;
        from[j] = i;
      }
    }
  }
  std::vector<size_t> starts;
  for (size_t j = n; j > 0; j = from[j])
    starts.push_back(from[j]);
  std::vector<int64_t> bucket_of(n, 0);
  int64_t b = 0;
  for (auto it = starts.rbegin(); it != starts.rend(); ++it, ++b) {
    const size_t end = it + 1 == starts.rend() ? n : *(it + 1);
    for (size_t k = *it; k < end; ++k)
      bucket_of[k] = b;
  }
  return bucket_of;
}

double predicted_bucket_end(const std::vector<double>& ready, const std::vector<size_t>& bytes,
                            const std::vector<int64_t>& bucket_of, double latency,
                            double seconds_per_byte) {
  double end = 0, ready_max = 0;
  size_t sum = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    ready_max = std::max(ready_max, ready[k]);
    sum += bytes[k];
    if (k + 1 == bytes.size() || bucket_of[k + 1] != bucket_of[k]) {
      end = std::max(end, ready_max) + latency + double(sum) * seconds_per_byte;
      sum = 0;
    }
  }
  return end;
}

namespace {

// Whether `g` is exactly the bucket slot `slot` (gradient_as_bucket_view's gradients).
bool is_view_of(const tensor& g, const tensor& slot) {
  return g.data_ptr() == slot.data_ptr() && g.sizes() == slot.sizes() &&
         g.strides() == slot.strides() && g.dtype() == slot.dtype();
}

} // namespace

// Note [In-place gradients]
// Where the replicas share memory and nothing crosses processes (trainer actors of one
// process: replica_group::reduces_in_place), a bucket is only a group of parameters launched
// together: all_reduce_coalesced reduces each parameter's .grad where backward left it, and the
// average lands in every replica's .grad. No copy into a bucket, none out of it. A parameter
// without a gradient contributes a zeros tensor, which becomes its gradient if some replica
// used it. Elsewhere a bucket is a flat buffer the gradients are copied into (or are views of,
// with gradient_as_bucket_view), since a process group reduces one contiguous tensor.

// Note [Buckets per device]
// A module whose parameters lie on several devices (torch's multi-device module, as the seeds'
// demo_model_parallel: half the layers on one GPU, half on another) gets buckets per device,
// as torch's do: a bucket holds parameters of one dtype on one device. The process group
// reduces on its collective device (NCCL's is the process's own GPU), so a bucket whose
// parameters live elsewhere keeps its flat buffer there: the gradients are copied across on
// the way in and the averages back on the way out (gradient_as_bucket_view makes views only
// of buckets on the parameters' own device). torch's NCCL group keeps a communicator per
// device instead, which saves the copies; none of our machines has two GPUs to measure it.

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
    tensor flat;                  // undefined when the group reduces in place
    size_t bytes = 0;
    std::vector<tensor> reduced_in_place; // in place: this iteration's tensor per slot
    size_t pending = 0;                   // parameters not yet ready this iteration
    work reduced; // the all-reduce, then the bucket's observers (Note [NCCL stream order])
  };

  std::vector<tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<replica_group> group;
  reducer_options opts;
  bool in_place = false; // group->reduces_in_place(): no flat buckets

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
  std::vector<size_t> agreed;      // the rebuilt buckets' parameter order

  // Adaptive buckets (Note [Adaptive buckets]): the measured iterations' timings.
  using clock = std::chrono::steady_clock;
  struct timing {
    clock::time_point begin, end;           // prepare, and the end of finalize
    std::vector<clock::time_point> ready;   // per parameter
    std::vector<clock::time_point> launch;  // per bucket
    std::vector<clock::time_point> reduced; // per bucket, written by the completing thread
  };
  enum class phase { baseline, trial, settled };
  static constexpr int64_t kMeasureFrom = 2; // iteration 1 rebuilds, 2.. are measured
  static constexpr int64_t kMeasured = 3;    // iterations per phase
  phase adapt_phase = phase::baseline;
  int64_t phase_start = kMeasureFrom;
  std::vector<int64_t> baseline_choice; // the rebuilt buckets, by position in `agreed`
  double baseline_time = 0;             // rank 0's median iteration with them
  std::vector<std::shared_ptr<timing>> timings;
  std::shared_ptr<timing> measuring; // this iteration's, or null
  double measured_latency = 0;       // seconds

  std::mutex observer_mu;
  std::function<void(const bucket_event&)> observer;
  comm_hook hook; // register_comm_hook's, or empty: the built-in average

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
      const dtype dt = params[assignment[b].front()].dtype();
      bk.bytes = size_t(numel) * element_size(dt);
      if (in_place)
        bk.reduced_in_place.resize(bk.params.size());
      else
        bk.flat = group->new_buffer(numel, dt);
      buckets.push_back(std::move(bk));
    }
  }

  tensor slot_view(size_t b, size_t slot, const tensor& of) const {
    const bucket& bk = buckets[b];
    return of.narrow(0, bk.offsets[slot], params[bk.params[slot]].numel())
        .view(params[bk.params[slot]].sizes());
  }

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
    build_buckets(compute_bucket_assignment(params, agreed, first_cap(), cap()));
    rebuilt = true;
  }

  // Note [Adaptive buckets]
  // The static assignment (a 1 MiB first bucket, then 25 MiB ones) knows neither when each
  // gradient gets ready nor what an all-reduce costs, so the last bucket, whose exchange
  // cannot start before backward ends, is often large. After the rebuild, iterations
  // kMeasureFrom .. kMeasureFrom + kMeasured - 1 record when each gradient got ready and when
  // each bucket was launched and reduced. Then rank 0 fits the all-reduce cost as
  // latency + bytes * seconds_per_byte (the latency: a one-element all-reduce's, timed once;
  // per byte: the rest of the buckets' service times, each from the later of its launch and
  // the previous bucket's end to its end, since the group runs them one at a time),
  // takes each parameter's median ready time, and chooses the boundaries that end the last
  // all-reduce earliest (choose_bucket_boundaries), unless the model predicts a tail after
  // the last gradient shorter by less than a tenth or than one latency. The model ignores
  // that an all-reduce takes CPU time from backward: where cores are few (two replicas on two
  // cores), an exchange that overlaps backward slows it down as much as it hides. So the
  // choice is a trial: its buckets run kMeasured iterations, and rank 0 keeps them only if
  // its median iteration (forward to the end of the reduction) beats the baseline's by 2%;
  // otherwise the baseline buckets come back. Each decision is broadcast (every replica must
  // pair the same buckets) and applied in the forward of the same iteration on every
  // replica. The buckets change which elements travel together, never the arithmetic: every
  // element is still summed in rank order.

  // The fixed cost of one all-reduce, from a few one-element ones (a collective: every
  // replica runs it in the same forward); rank 0's median is what propose() uses.
  void measure_latency() {
    collective_tag tag("DDP bucket timing");
    std::vector<double> seen;
    tensor one = zeros({1}, {.device = group->collective_device()});
    for (int k = 0; k < 5; ++k) {
      const auto t0 = clock::now();
      group->all_reduce(one, reduce_op::sum).synchronize(); // the host's view of its end
      seen.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    std::nth_element(seen.begin(), seen.begin() + 2, seen.end());
    measured_latency = seen[2];
  }

  static double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  double median_iteration() const {
    std::vector<double> v;
    for (const auto& t : timings)
      v.push_back(std::chrono::duration<double>(t->end - t->begin).count());
    return median(v);
  }

  std::vector<int64_t> current_choice() const {
    std::vector<int64_t> c(agreed.size(), 0);
    for (size_t b = 0, k = 0; b < buckets.size(); ++b)
      for (size_t slot = 0; slot < buckets[b].params.size(); ++slot)
        c[k++] = int64_t(b);
    return c;
  }

  void build_from_choice(const int64_t* c) {
    std::vector<std::vector<size_t>> a;
    for (size_t k = 0; k < agreed.size(); ++k) {
      if (k == 0 || c[k] != c[k - 1])
        a.emplace_back();
      a.back().push_back(agreed[k]);
    }
    build_buckets(std::move(a));
  }

  // Rank 0's candidate buckets from the baseline's timings, or the current ones when the
  // model promises too little (by position in `agreed`).
  std::vector<int64_t> propose() const {
    const size_t n = agreed.size();
    std::vector<size_t> bytes(n);
    std::vector<int> kinds(n);
    std::map<std::pair<dtype, device>, int> kind_of; // a bucket holds one dtype on one device
    for (size_t k = 0; k < n; ++k) {
      const tensor& p = params[agreed[k]];
      bytes[k] = size_t(p.nbytes());
      kinds[k] = kind_of.try_emplace({p.dtype(), p.device()}, int(kind_of.size())).first->second;
    }
    std::vector<clock::time_point> first; // each measured iteration's first gradient
    for (const auto& t : timings)
      first.push_back(*std::min_element(t->ready.begin(), t->ready.end()));
    std::vector<double> ready(n, 0);
    for (size_t k = 0; k < n; ++k) {
      std::vector<double> seen;
      for (size_t m = 0; m < timings.size(); ++m)
        seen.push_back(
            std::chrono::duration<double>(timings[m]->ready[agreed[k]] - first[m]).count());
      ready[k] = median(seen);
    }
    // The latency is the one-element all-reduce's; the rest of every measured bucket's
    // service time is per byte. (A least-squares intercept over two or three bucket sizes,
    // whose times include backward competing for the CPU, came out at milliseconds.)
    double bytes_sum = 0, rest_sum = 0;
    for (const auto& t : timings)
      for (size_t b = 0; b < buckets.size(); ++b) {
        const auto start = b == 0 ? t->launch[b] : std::max(t->launch[b], t->reduced[b - 1]);
        const double service = std::chrono::duration<double>(t->reduced[b] - start).count();
        bytes_sum += double(buckets[b].bytes);
        rest_sum += std::max(0.0, service - measured_latency);
      }
    // With nothing measured beyond the latency, 10 GB/s: a memory copy's order, so that bytes
    // still weigh something in the choice.
    constexpr double kFallbackPerByte = 1e-10;
    const double per_byte = bytes_sum > 0 && rest_sum > 0 ? rest_sum / bytes_sum : kFallbackPerByte;
    const std::vector<int64_t> current = current_choice();
    const auto candidate =
        choose_bucket_boundaries(ready, bytes, kinds, cap(), measured_latency, per_byte);
    const double last = *std::max_element(ready.begin(), ready.end());
    const double now_tail =
        predicted_bucket_end(ready, bytes, current, measured_latency, per_byte) - last;
    const double new_tail =
        predicted_bucket_end(ready, bytes, candidate, measured_latency, per_byte) - last;
    return new_tail < 0.9 * now_tail && now_tail - new_tail > measured_latency ? candidate
                                                                               : current;
  }

  // At the forward of a phase's end: rank 0 decides, everyone applies (Note [Adaptive
  // buckets]). A decision travels as [flag, bucket per position...].
  void end_phase() {
    collective_tag tag("DDP bucket timing");
    const size_t n = agreed.size();
    tensor decision = zeros({int64_t(n + 1)}, {.dtype = dtype::int64});
    auto* d = decision.data_ptr<int64_t>();
    if (group->rank() == 0) {
      if (adapt_phase == phase::baseline) {
        baseline_time = median_iteration();
        const auto candidate = propose();
        d[0] = candidate != current_choice() ? 1 : 0; // 1: try it
        std::copy(candidate.begin(), candidate.end(), d + 1);
      } else {
        d[0] = median_iteration() < 0.98 * baseline_time ? 1 : 0; // 1: keep the trial
      }
    }
    broadcast_from_rank0(*group, {decision});
    d = decision.data_ptr<int64_t>();
    if (group->rank() == 0 && trace::enabled()) {
      const bool trial = adapt_phase == phase::trial;
      const double ms = median_iteration() * 1e3;
      trace::record("buckets", trial ? (d[0] ? "trial kept" : "trial reverted") : "baseline",
                    timings.front()->begin, timings.back()->end,
                    "\"buckets\": " + std::to_string(buckets.size()) +
                        ", \"median_iteration_ms\": " + std::to_string(ms) +
                        (trial ? ", \"baseline_ms\": " + std::to_string(baseline_time * 1e3)
                               : ", \"trial\": " + std::to_string(d[0])));
    }
    if (adapt_phase == phase::baseline && d[0] == 1) {
      baseline_choice = current_choice();
      build_from_choice(d + 1);
      adapt_phase = phase::trial;
      phase_start = iteration;
    } else {
      if (adapt_phase == phase::trial && d[0] == 0)
        build_from_choice(baseline_choice.data());
      adapt_phase = phase::settled;
    }
    timings.clear();
  }

  size_t cap() const { return size_t(opts.bucket_cap_mb * 1024 * 1024); }
  size_t first_cap() const { return size_t(opts.first_bucket_cap_mb * 1024 * 1024); }

  void prepare(const std::vector<tensor>& outputs) {
    ACTORCH_CHECK(!in_backward,
                  "DistributedDataParallel: the previous iteration's reduction has not finished "
                  "(a backward pass failed or is still running)");
    if (iteration == 1 && !rebuilt)
      rebuild_from_rank0();
    measuring.reset();
    const bool adaptive =
        opts.adaptive_buckets && !hook && rebuilt && adapt_phase != phase::settled;
    if (adaptive && iteration == phase_start + kMeasured)
      end_phase();
    if (adaptive && iteration == kMeasureFrom)
      measure_latency();
    // (end_phase above may have settled it.)
    if (adaptive && adapt_phase != phase::settled && iteration >= phase_start) {
      measuring = std::make_shared<timing>();
      measuring->begin = clock::now();
      measuring->ready.resize(params.size());
      measuring->launch.resize(buckets.size());
      measuring->reduced.resize(buckets.size());
      timings.push_back(measuring);
    }
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
    if (measuring)
      measuring->ready[i] = clock::now();
    const auto [b, slot] = where[i];
    if (in_place) {
      // The gradient itself takes part (Note [In-place gradients]); a parameter without one
      // contributes zeros, which become its gradient if another replica used it.
      no_grad guard;
      const tensor g = params[i].grad();
      buckets[b].reduced_in_place[slot] = used && g.defined() ? g : zeros_like(params[i]);
    } else {
      no_grad guard;
      tensor dst = slot_view(b, slot, buckets[b].flat);
      const tensor g = params[i].grad();
      if (!used || !g.defined())
        dst.zero_();
      else if (!is_view_of(g, dst)) // gradient_as_bucket_view: already in place
        dst.copy_(g);
    }
    if (--buckets[b].pending == 0)
      launch_ready();
  }

  grad_bucket hooked_bucket(size_t b) const {
    const bucket& bk = buckets[b];
    std::vector<tensor> grads, ps;
    for (size_t slot = 0; slot < bk.params.size(); ++slot) {
      grads.push_back(slot_view(b, slot, bk.flat));
      ps.push_back(params[bk.params[slot]]);
    }
    return grad_bucket(b, b + 1 == buckets.size(), bk.flat, std::move(grads), std::move(ps), group);
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      const size_t b = next_launch++;
      const size_t bytes = buckets[b].bytes;
      notify(bucket_event::ready, iteration, b, bytes);
      // AVG: the division happens once per bucket where the sum completes (for trainer
      // threads, once per process), so copying the result back is a plain copy.
      if (measuring)
        measuring->launch[b] = clock::now();
      work w;
      collective_tag tag("DDP bucket " + std::to_string(b));
      if (hook) {
        grad_bucket gb = hooked_bucket(b);
        w = hook(gb);
      } else {
        w = in_place ? group->all_reduce_coalesced(buckets[b].reduced_in_place, reduce_op::avg)
                     : group->all_reduce(buckets[b].flat, reduce_op::avg);
      }
      std::weak_ptr<impl> weak = weak_from_this();
      const int64_t it = iteration;
      // The timing slot is written here and read after finalize waited for this work.
      buckets[b].reduced = w.then([weak, b, it, bytes, t = measuring](const work& done) {
        if (t)
          t->reduced[b] = clock::now();
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
      collective_tag tag("DDP unused parameters");
      tensor used = empty({int64_t(params.size())}, {.dtype = dtype::int32});
      auto* u = used.data_ptr<int32_t>();
      for (size_t i = 0; i < params.size(); ++i)
        u[i] = locally_used[i];
      work w = group->all_reduce(used.to(group->collective_device()), reduce_op::sum);
      w.wait();
      used_anywhere = w.result().at(0).cpu();
    }
    no_grad guard;
    for (size_t b = 0; b < buckets.size(); ++b) {
      bucket& bk = buckets[b];
      // The average is now in bk.flat (an in-place all-reduce): over NCCL for this thread's
      // stream, the host going on at once, except while the iteration is timed.
      if (measuring)
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
        if (in_place) {
          const tensor& avg = bk.reduced_in_place[slot];
          if (!params[i].grad().defined() || !params[i].grad().is_same(avg))
            params[i].set_grad(avg);
          continue;
        }
        const tensor avg = slot_view(b, slot, bk.flat);
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
    if (measuring)
      measuring->end = clock::now();
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
  impl_->params = std::move(params);
  impl_->names = std::move(names);
  impl_->group = std::move(replicas);
  impl_->opts = opts;
  impl_->in_place = impl_->group->reduces_in_place();
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

bool reducer::buckets_adapted() const {
  return impl_->opts.adaptive_buckets && impl_->adapt_phase == impl::phase::settled;
}

void reducer::shadow_iteration() {
  impl& r = *impl_;
  r.prepare({}); // the iteration's own collectives (rebuild, timings) as on the others
  r.in_backward = true;
  for (const auto& bk : r.buckets) // bucket by bucket, so each launches in order
    for (size_t i : bk.params)
      r.mark_ready(i, false);
  r.finalize();
}

void reducer::register_comm_hook(comm_hook hook) {
  ACTORCH_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  ACTORCH_CHECK(!impl_->hook, "register_comm_hook can only be called once");
  ACTORCH_CHECK(impl_->iteration == 0 && !impl_->armed,
                "register_comm_hook must be called before the first forward and backward");
  impl_->hook = std::move(hook);
  if (impl_->in_place) { // a hook reduces flat buckets
    impl_->in_place = false;
    impl_->build_buckets(impl_->assignment);
  }
}

void reducer::set_observer(std::function<void(const bucket_event&)> fn) {
  std::lock_guard lock(impl_->observer_mu);
  impl_->observer = std::move(fn);
}

} // namespace actorch::dist
