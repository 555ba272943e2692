// DataParallel (data_parallel.hpp). See Note [DataParallel].
//
// Note [DataParallel]
// ~~~~~~~~~~~~~~~~~~~
// torch's DataParallel broadcasts the parameters to every device at each forward with an
// autograd function (Broadcast), so the replicas' gradients flow back into the module's through
// one backward pass that the devices' threads run in parallel. Here the replicas are clones
// with parameters of their own (replicas on different threads must not share autograd state:
// a leaf's gradient accumulator is not safe for concurrent use), whose values are copied from
// the module's before each forward. Forward runs each replica's chunk on its replica actor, with
// a graph of its own (the chunk a detached leaf); the gathered output gets one node,
// DataParallelBackward, whose inputs are the batch and the module's parameters. Its backward
// sends each replica actor the gradient of its chunk: the replicas run their backward passes at
// once, and the node returns the chunks' input gradients concatenated and, for each parameter,
// the sum of the replicas' gradients, which the engine accumulates into the module's own as for
// any leaf. The replica actors are detached: each is a thread, as torch's per-device threads.
#include "actors/data_parallel.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include "actors/thread_scope.hpp"
#include "caf/all.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::nn {
namespace {

/// Work for a replica actor: a function it runs on its thread.
struct replica_task {
  std::function<void()> fn;
};

} // namespace
} // namespace actorch::nn

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorch::nn::replica_task)

namespace actorch::nn {
namespace {

using apply_atom = caf::atom_constant<caf::atom("dp_apply")>;
using done_atom = caf::atom_constant<caf::atom("dp_done")>;

// Replica `replica`'s actor. (It takes its index as an argument: CAF 0.17 spawning a function
// of no arguments dereferences a null tuple, which UBSan reports.)
caf::behavior replica_actor(caf::event_based_actor* self, int64_t replica) {
  return {[self, replica](apply_atom, const replica_task& task) {
    std::string error;
    try {
      task.fn();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty())
        error = "an exception without a message";
    } catch (...) {
      error = "an exception not derived from std::exception";
    }
    self->send(caf::actor_cast<caf::actor>(self->current_sender()), done_atom::value, replica,
               std::move(error));
  }};
}

caf::actor_system_config& configured(caf::actor_system_config& cfg) {
  // The replica actors are detached (a thread each); the scheduler runs nothing else.
  cfg.set("scheduler.max-threads", size_t(1));
  return cfg;
}

} // namespace

namespace detail {

/// The replica actors: run(fns) runs fns[i] on actor i, all at once, and waits for all.
class replica_engine {
public:
  explicit replica_engine(std::vector<int> ids) : ids_(std::move(ids)), sys_(configured(cfg_)) {
    // The engine may be destroyed on another thread: Note [CAF's per-thread logger].
    actors::thread_scope scope;
    for (size_t i = 0; i < ids_.size(); ++i)
      actors_.push_back(sys_.spawn<caf::detached>(replica_actor, int64_t(i)));
  }
  ~replica_engine() {
    for (auto& a : actors_)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  replica_engine(const replica_engine&) = delete;
  replica_engine& operator=(const replica_engine&) = delete;

  void run(std::vector<std::function<void()>> fns) {
    ACTORCH_CHECK(fns.size() <= actors_.size(), "DataParallel: ", fns.size(), " tasks for ",
                  actors_.size(), " replicas");
    actors::thread_scope scope; // See Note [CAF's per-thread logger]
    caf::scoped_actor self{sys_};
    for (size_t i = 0; i < fns.size(); ++i)
      self->send(actors_[i], apply_atom::value, replica_task{std::move(fns[i])});
    std::vector<std::string> errors(fns.size());
    for (size_t done = 0; done < fns.size(); ++done)
      self->receive([&](done_atom, int64_t replica, std::string& error) {
        errors[size_t(replica)] = std::move(error);
      });
    for (size_t i = 0; i < errors.size(); ++i)
      ACTORCH_CHECK(errors[i].empty(), "DataParallel: caught an error in replica ", i,
                    " on device cpu:", ids_[i], ": ", errors[i]);
  }

private:
  std::vector<int> ids_;
  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  std::vector<caf::actor> actors_;
};

} // namespace detail

namespace parallel {

std::vector<tensor> scatter(const tensor& input, int64_t n, int64_t dim) {
  ACTORCH_CHECK(input.defined(), "scatter: the input is undefined");
  ACTORCH_CHECK(n > 0, "scatter: the number of chunks must be positive but got ", n);
  ACTORCH_CHECK(input.dim() > 0 && input.numel() > 0,
                "scatter: cannot split an empty or 0-dim input of shape ", shape_str(input.sizes()),
                " across replicas");
  return input.chunk(n, dim);
}

tensor gather(const std::vector<tensor>& outputs, int64_t dim) {
  ACTORCH_CHECK(!outputs.empty(), "gather: no outputs");
  return cat(outputs, dim);
}

std::vector<std::shared_ptr<module>> replicate(const module& m, int64_t n) {
  ACTORCH_CHECK(n > 0, "replicate: the number of copies must be positive but got ", n);
  std::vector<std::shared_ptr<module>> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(m.clone());
  return out;
}

std::vector<tensor> parallel_apply(const std::vector<std::shared_ptr<module>>& modules,
                                   const std::vector<tensor>& inputs) {
  ACTORCH_CHECK(modules.size() == inputs.size(), "parallel_apply: ", modules.size(),
                " modules but ", inputs.size(), " inputs");
  std::vector<int> ids(modules.size());
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int(i);
  std::vector<tensor> out(modules.size());
  std::vector<std::function<void()>> fns;
  const bool grad = grad_enabled();
  for (size_t i = 0; i < modules.size(); ++i)
    fns.push_back([&, i, grad] {
      std::optional<no_grad> off;
      if (!grad)
        off.emplace();
      out[i] = (*modules[i])(inputs[i]);
    });
  detail::replica_engine(ids).run(std::move(fns));
  return out;
}

} // namespace parallel

// data_parallel. -------------------------------------------------------------------------------

namespace {

/// What one forward leaves for its backward: each replica's chunk (a leaf), its output (the
/// root of its graph) and its parameters.
struct step_state {
  std::vector<tensor> inputs, outputs;
  std::vector<std::vector<tensor>> params;
};

/// Copies `from`'s tensors into `to`'s, in order (no graph).
void copy_values(const std::vector<tensor>& from, std::vector<tensor> to) {
  no_grad guard;
  for (size_t i = 0; i < from.size(); ++i)
    to[i].copy_(from[i]);
}

} // namespace

data_parallel::data_parallel(std::shared_ptr<nn::module> module, std::vector<int> device_ids,
                             int output_device, int64_t dim)
    : module_(std::move(module)), device_ids_(std::move(device_ids)), dim_(dim) {
  ACTORCH_CHECK(module_ != nullptr, "DataParallel: the module is null");
  if (device_ids_.empty())
    for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
      device_ids_.push_back(int(i));
  for (size_t i = 0; i < device_ids_.size(); ++i) {
    ACTORCH_CHECK(device_ids_[i] >= 0, "DataParallel: device id ", device_ids_[i], " is negative");
    for (size_t j = 0; j < i; ++j)
      ACTORCH_CHECK(device_ids_[j] != device_ids_[i], "DataParallel: device id ", device_ids_[i],
                    " is given twice");
  }
  ACTORCH_CHECK(output_device < 0 || std::find(device_ids_.begin(), device_ids_.end(),
                                               output_device) != device_ids_.end(),
                "DataParallel: output_device ", output_device,
                " is not one of the device_ids (on the CPU every output is host memory)");
  engine_ = std::make_shared<detail::replica_engine>(device_ids_);
}

data_parallel::~data_parallel() = default;

tensor data_parallel::forward(const tensor& input) {
  const std::vector<tensor> chunks = parallel::scatter(input, int64_t(device_ids_.size()), dim_);
  const size_t k = chunks.size();
  const std::vector<tensor> params = module_->parameters(), buffers = module_->buffers();
  if (replicas_.empty() || replicas_[0]->parameters().size() != params.size() ||
      replicas_[0]->buffers().size() != buffers.size())
    replicas_ = parallel::replicate(*module_, int64_t(device_ids_.size()));
  auto st = std::make_shared<step_state>();
  st->inputs.resize(k);
  st->outputs.resize(k);
  for (size_t r = 0; r < k; ++r) {
    // See Note [DataParallel]: each forward starts from the module's values and mode.
    st->params.push_back(replicas_[r]->parameters());
    copy_values(params, st->params.back());
    copy_values(buffers, replicas_[r]->buffers());
    replicas_[r]->copy_training_modes_from(*module_);
  }
  const bool grad = grad_enabled();
  const bool input_grad = grad && input.requires_grad();
  std::vector<std::function<void()>> fns;
  for (size_t r = 0; r < k; ++r)
    fns.push_back([st, r, grad, input_grad, chunk = chunks[r], replica = replicas_[r]] {
      std::optional<no_grad> off;
      if (!grad)
        off.emplace();
      tensor in = chunk.detach();
      if (input_grad)
        in.requires_grad_();
      st->inputs[r] = in;
      st->outputs[r] = (*replica)(in);
      ACTORCH_CHECK(st->outputs[r].defined(), "the replica's forward returned an undefined tensor");
    });
  engine_->run(std::move(fns));
  // torch's device[0] replica shares the module's buffers: its updates (BatchNorm's running
  // statistics) are the module's.
  copy_values(replicas_[0]->buffers(), buffers);

  std::vector<tensor> outs;
  bool tracked = false;
  for (const tensor& o : st->outputs) {
    outs.push_back(o.detach());
    tracked = tracked || o.requires_grad();
  }
  tensor out;
  {
    no_grad guard;
    out = parallel::gather(outs, dim_);
  }
  std::vector<const tensor*> inputs{&input};
  for (const tensor& p : params)
    inputs.push_back(&p);
  const bool any_grad =
      input_grad ||
      std::any_of(params.begin(), params.end(), [](const tensor& t) { return t.requires_grad(); });
  if (!tracked || !any_grad) // untracked: grad mode was off, or nothing needs a gradient
    return out;
  const int64_t d = dim_; // split, size and cat wrap a negative one, as torch's do
  autograd::record(out, "DataParallelBackward", inputs, {},
                   [st, eng = engine_, d, n_params = params.size()](
                       const std::vector<tensor>& grads, const std::vector<tensor>&) {
                     // See Note [DataParallel]: the replicas' backward passes at once, then the
                     // sums.
                     shape_t sizes;
                     for (const tensor& in : st->inputs)
                       sizes.push_back(in.size(d));
                     const std::vector<tensor> g = grads[0].split(sizes, d);
                     std::vector<std::function<void()>> backwards;
                     for (size_t r = 0; r < st->outputs.size(); ++r)
                       backwards.push_back([st, r, gr = g[r]] {
                         if (st->outputs[r].requires_grad())
                           st->outputs[r].backward(gr);
                       });
                     eng->run(std::move(backwards));
                     std::vector<tensor> result(1 + n_params);
                     if (autograd::needs_input_grad(0)) {
                       std::vector<tensor> parts;
                       for (const tensor& in : st->inputs)
                         parts.push_back(in.grad().defined() ? in.grad() : zeros_like(in));
                       result[0] = cat(parts, d);
                     }
                     for (size_t p = 0; p < n_params; ++p) {
                       tensor sum;
                       for (auto& replica_params : st->params) {
                         tensor& rp = replica_params[p];
                         if (rp.grad().defined())
                           sum = sum.defined() ? sum.add(rp.grad()) : rp.grad();
                         rp.set_grad({}); // the next backward starts from none
                       }
                       result[1 + p] = sum;
                     }
                     return result;
                   });
  return out;
}

} // namespace actorch::nn
