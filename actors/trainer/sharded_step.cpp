// Note [Sharded step]
// Trainer actors of one process are replicas in one address space, so with DDP each replica
// keeps a copy of every parameter and of its optimizer state, the in-place all-reduce reads
// both replicas' gradients and writes the average into both (on whichever thread arrives
// last, the other idle), and then every replica runs the whole optimizer step on identical
// copies. Sharded instead (ZeroRedundancyOptimizer's partition, torch's by size):
//  - after DDP's broadcast made them equal, every replica's parameters take replica 0's memory
//    (tensor::set_data): one copy, read by every forward and backward; each replica keeps its
//    own .grad;
//  - DDP arms no reduction (its forwards run under no_sync; buffers are still broadcast);
//  - after backward, a barrier; then each replica averages its shard's gradients over every
//    replica's .grad (in replica order, divided once: the bits the in-place all-reduce gives)
//    into its own, and its optimizer, made by the spec over the shard, steps the shard of the
//    one copy; a second barrier, and the next forward reads every shard stepped.
// Per replica and step that is one read of every replica's gradients of a shard and one write
// of the shard, in parallel on every trainer thread, and 1/N of the optimizer step; nothing is
// exchanged after the step. The results are the unsharded job's, bit for bit (a test checks).
// One process only: across processes the shards' new values would have to travel, which is
// ZeroRedundancyOptimizer's exchange (comm/ddp/zero_redundancy_optimizer.hpp).
#include "actors/trainer/sharded_step.hpp"

#include <map>
#include <string>

#include "base/error.hpp"
#include "comm/ddp/zero_redundancy_optimizer.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors {

namespace {

// The parameters of one shard as a module, for the spec's make_optimizer.
class shard_module : public nn::module {
public:
  explicit shard_module(const std::vector<tensor>& params) {
    for (size_t k = 0; k < params.size(); ++k)
      register_parameter("p" + std::to_string(k), params[k]);
  }
};

// dst[j] = (parts[0][j] + parts[1][j] + ...) / n, element by element (dst may be a part).
template <class T> void average_into(T* dst, const std::vector<const T*>& parts, int64_t count) {
  const T n = T(parts.size());
  for (int64_t j = 0; j < count; ++j) {
    T acc = parts[0][j];
    for (size_t k = 1; k < parts.size(); ++k)
      acc += parts[k][j];
    dst[j] = acc / n;
  }
}

template <class T> std::vector<const T*> pointers(const std::vector<tensor>& ts) {
  std::vector<const T*> out;
  for (const tensor& t : ts)
    out.push_back(t.data_ptr<T>());
  return out;
}

} // namespace

std::unique_ptr<optim::optimizer> sharded_step::join(
    int i, nn::module& model,
    const std::function<std::unique_ptr<optim::optimizer>(nn::module&)>& make_optimizer) {
  replica& me = replicas_[size_t(i)];
  me.params = model.parameters();
  for (const tensor& p : me.params)
    ACTORCH_CHECK(p.device().is_cpu() && p.is_contiguous() &&
                      (p.dtype() == dtype::float32 || p.dtype() == dtype::float64),
                  "train_data_parallel: the sharded step takes contiguous float32 or float64 CPU "
                  "parameters; set trainer_spec::zero_redundancy = false for this model");
  barrier(); // every replica's parameters are known
  const replica& first = replicas_[0];
  ACTORCH_CHECK(first.params.size() == me.params.size(), "train_data_parallel: replica ", i,
                " has ", me.params.size(), " parameters, replica 0 ", first.params.size());
  if (i != 0)
    for (size_t k = 0; k < me.params.size(); ++k)
      me.params[k].set_data(first.params[k]);
  me.shard = dist::partition_parameters(me.params, int(replicas_.size()))[size_t(i)];
  std::unique_ptr<optim::optimizer> opt;
  if (!me.shard.empty()) {
    std::vector<tensor> mine;
    for (size_t k : me.shard)
      mine.push_back(me.params[k]);
    shard_module holder(mine);
    opt = make_optimizer(holder);
    ACTORCH_CHECK(opt != nullptr, "train_data_parallel: make_optimizer returned null");
    ACTORCH_CHECK(opt->params().size() == mine.size(),
                  "train_data_parallel: the sharded step gives make_optimizer a module of ",
                  mine.size(), " parameters, and its optimizer took ", opt->params().size(),
                  "; set trainer_spec::zero_redundancy = false for an optimizer over other "
                  "tensors");
  }
  me.opt = opt.get();
  barrier(); // nobody steps before every replica reads replica 0's memory
  return opt;
}

void sharded_step::average_shard(int i) {
  barrier(); // every replica's gradients are complete
  no_grad guard;
  const replica& me = replicas_[size_t(i)];
  for (size_t k : me.shard) {
    const tensor& p = me.params[k];
    std::vector<tensor> grads;
    bool any = false;
    for (const replica& r : replicas_) {
      grads.push_back(r.params[k].grad());
      any = any || grads.back().defined();
    }
    if (!any)
      continue;             // no replica used it: it stays without a gradient, as with DDP
    for (tensor& g : grads) // an unused parameter contributes zeros
      g = g.defined() ? g.contiguous() : zeros_like(p);
    tensor out = p.grad();
    if (!out.defined() || !out.is_contiguous()) {
      out = empty_like(p);
      tensor(p).set_grad(out);
    }
    if (p.dtype() == dtype::float32)
      average_into(out.data_ptr<float>(), pointers<float>(grads), p.numel());
    else
      average_into(out.data_ptr<double>(), pointers<double>(grads), p.numel());
  }
}

void sharded_step::stepped(int) {
  barrier();
}

optim::optimizer_state sharded_step::state_dict() const {
  std::vector<std::pair<std::string, tensor>> entries;
  std::map<std::string, std::string> metadata;
  for (const replica& r : replicas_) {
    if (r.opt == nullptr)
      continue;
    optim::optimizer_state mine = dist::globalize_state(r.opt->state_dict(), r.shard);
    for (auto& e : mine.tensors)
      entries.push_back(std::move(e));
    if (metadata.empty())
      metadata = std::move(mine.metadata);
  }
  return dist::whole_state(std::move(entries), std::move(metadata), replicas_[0].params.size());
}

void sharded_step::load_state_dict(int i, const optim::optimizer_state& whole) {
  const replica& me = replicas_[size_t(i)];
  const optim::optimizer_state mine = dist::shard_state(whole, me.shard, me.params.size());
  if (me.opt != nullptr)
    me.opt->load_state_dict(mine);
}

void sharded_step::abort(std::exception_ptr e) {
  std::lock_guard lock(mu_);
  if (!aborted_)
    aborted_ = e;
  cv_.notify_all();
}

void sharded_step::barrier() {
  std::unique_lock lock(mu_);
  if (aborted_)
    std::rethrow_exception(aborted_);
  const uint64_t gen = generation_;
  if (++arrived_ == replicas_.size()) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen)
    std::rethrow_exception(aborted_);
}

} // namespace actorch::actors
