// Note [Sharded step]
// Trainer actors of one process are replicas in one address space, so with DDP each replica
// keeps a copy of every parameter and of its optimizer state, the in-place all-reduce reads
// both replicas' gradients and writes the average into both (on whichever thread arrives
// last, the other idle), and then every replica runs the whole optimizer step on identical
// copies. Sharded instead:
//  - after DDP's broadcast made them equal, every replica's parameters take replica 0's memory
//    (tensor::set_data): one copy, read by every forward and backward; each replica keeps its
//    own .grad;
//  - replica r's shard is the r-th of N equal runs of the parameters' elements taken in order
//    (boundaries on 16-element lines): pieces of parameters, as 1-D leaves over the shared
//    memory, over which make_optimizer builds replica r's optimizer. torch's
//    ZeroRedundancyOptimizer gives whole parameters to ranks, which on an MLP leaves one rank
//    most of the work (the hidden layer's weight); elementwise optimizers (SGD, Adam) step a
//    piece exactly as they step it inside the whole parameter;
//  - DDP arms no reduction (its forwards run under no_sync; buffers are still broadcast);
//  - after backward, a barrier; then each replica averages its pieces' gradients over every
//    replica's .grad (in replica order, divided once: the bits the in-place all-reduce gives)
//    and steps them; a second barrier, and the next forward reads every piece stepped.
// Per replica and step that is one read of every replica's gradients over 1/N of the elements
// and one write of them, in parallel on every trainer thread, and 1/N of the optimizer step;
// nothing is exchanged after the step. The results are the unsharded job's, bit for bit (a test
// checks). A checkpoint's optimizer state is reassembled per parameter (elementwise entries
// concatenated, scalar ones such as Adam's step taken once). One process only: across
// processes the pieces' new values would have to travel, which is ZeroRedundancyOptimizer's
// exchange (comm/ddp/zero_redundancy_optimizer.hpp).
#include "actors/trainer/sharded_step.hpp"

#include <algorithm>
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

// dst[j] = (parts[0][j] + parts[1][j] + ...) / n for j < count (dst may be a part): chunk by
// chunk through a buffer in L1, each pass a plain loop the compiler vectorizes.
template <class T> void average_into(T* dst, const std::vector<const T*>& parts, int64_t count) {
  constexpr int64_t kChunk = 1024;
  T acc[kChunk];
  const T n = T(parts.size());
  for (int64_t b = 0; b < count; b += kChunk) {
    const int64_t len = std::min(kChunk, count - b);
    const T* p0 = parts[0] + b;
    const T* p1 = parts[1] + b;
    for (int64_t j = 0; j < len; ++j)
      acc[j] = p0[j] + p1[j];
    for (size_t k = 2; k < parts.size(); ++k) {
      const T* pk = parts[k] + b;
      for (int64_t j = 0; j < len; ++j)
        acc[j] += pk[j];
    }
    T* out = dst + b;
    for (int64_t j = 0; j < len; ++j)
      out[j] = acc[j] / n;
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
  barrier(); // every replica's parameters are known
  const replica& first = replicas_[0];
  ACTORCH_CHECK(first.params.size() == me.params.size(), "train_data_parallel: replica ", i,
                " has ", me.params.size(), " parameters, replica 0 ", first.params.size());
  if (i != 0)
    for (size_t k = 0; k < me.params.size(); ++k)
      me.params[k].set_data(first.params[k]);
  // This replica's run of the elements, [begin, end) over the parameters in order.
  int64_t total = 0;
  for (const tensor& p : me.params)
    total += p.numel();
  const auto boundary = [&](int r) {
    return std::min(total, (total * r / int64_t(replicas_.size()) + 15) / 16 * 16);
  };
  const int64_t begin = boundary(i), end = i + 1 == int(replicas_.size()) ? total : boundary(i + 1);
  int64_t at = 0;
  for (size_t k = 0; k < me.params.size(); ++k) {
    const int64_t n = me.params[k].numel(), from = std::max(begin, at), to = std::min(end, at + n);
    if (from < to) {
      tensor view = me.params[k].detach().view({-1}).narrow(0, from - at, to - from);
      view.requires_grad_();
      me.shard.push_back({k, from - at, to - from, view});
    }
    at += n;
  }
  std::unique_ptr<optim::optimizer> opt;
  if (!me.shard.empty()) {
    std::vector<tensor> views;
    for (const piece& p : me.shard)
      views.push_back(p.view);
    shard_module holder(views);
    opt = make_optimizer(holder);
    ACTORCH_CHECK(opt != nullptr, "train_data_parallel: make_optimizer returned null");
    ACTORCH_CHECK(opt->params().size() == views.size(),
                  "train_data_parallel: the sharded step gives make_optimizer a module of ",
                  views.size(), " parameters, and its optimizer took ", opt->params().size(),
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
  replica& me = replicas_[size_t(i)];
  for (piece& pc : me.shard) {
    std::vector<tensor> grads;
    bool any = false;
    for (const replica& r : replicas_) {
      grads.push_back(r.params[pc.param].grad());
      any = any || grads.back().defined();
    }
    if (!any) { // no replica used it: no gradient, as with DDP, and the optimizer skips it
      pc.view.set_grad(tensor());
      continue;
    }
    const tensor& p = me.params[pc.param];
    for (tensor& g : grads) // a replica that did not use it contributes zeros
      g = g.defined() ? g.contiguous().view({-1}).narrow(0, pc.offset, pc.length)
                      : zeros({pc.length}, {.dtype = p.dtype()});
    if (!pc.view.grad().defined())
      pc.view.set_grad(empty({pc.length}, {.dtype = p.dtype()}));
    if (p.dtype() == dtype::float32)
      average_into(pc.view.grad().data_ptr<float>(), pointers<float>(grads), pc.length);
    else
      average_into(pc.view.grad().data_ptr<double>(), pointers<double>(grads), pc.length);
  }
}

void sharded_step::stepped() {
  barrier();
}

optim::optimizer_state sharded_step::state_dict() const {
  // Each parameter's entries from its pieces: an entry shaped as the piece is elementwise and
  // goes to the piece's run of the parameter's; any other (a 0-d step count) is per parameter,
  // the same in every piece, and taken once.
  const std::vector<tensor>& params = replicas_[0].params;
  std::map<std::pair<size_t, std::string>, tensor> whole;
  std::map<std::string, std::string> metadata;
  for (const replica& r : replicas_) {
    if (r.opt == nullptr)
      continue;
    optim::optimizer_state mine = r.opt->state_dict();
    for (const auto& [key, t] : mine.tensors) {
      const auto [k, name] = dist::split_state_key(key);
      const piece& pc = r.shard.at(k);
      auto [it, fresh] = whole.try_emplace({pc.param, name});
      if (t.sizes() == shape_t{pc.length}) {
        if (fresh)
          it->second = empty(params[pc.param].sizes(), {.dtype = t.dtype()});
        it->second.view({-1}).narrow(0, pc.offset, pc.length).copy_(t);
      } else if (fresh) {
        it->second = t.clone();
      }
    }
    if (metadata.empty())
      metadata = std::move(mine.metadata);
  }
  std::vector<std::pair<std::string, tensor>> entries;
  for (auto& [key, t] : whole)
    entries.emplace_back("state." + std::to_string(key.first) + "." + key.second, std::move(t));
  return dist::whole_state(std::move(entries), std::move(metadata), params.size());
}

void sharded_step::load_state_dict(int i, const optim::optimizer_state& whole) {
  const replica& me = replicas_[size_t(i)];
  const size_t total = me.params.size();
  auto it = whole.metadata.find("param_groups.0.params");
  ACTORCH_CHECK(it != whole.metadata.end() && it->second == std::to_string(total),
                "train_data_parallel: the optimizer state covers ",
                it == whole.metadata.end() ? std::string("no") : it->second,
                " parameters, the model has ", total);
  if (me.opt == nullptr)
    return;
  // The whole state's entries by parameter, parsed once.
  std::vector<std::vector<std::pair<std::string, tensor>>> of_param(total);
  for (const auto& [key, t] : whole.tensors) {
    auto [param, name] = dist::split_state_key(key);
    ACTORCH_CHECK(param < total, "train_data_parallel: the optimizer state's \"", key,
                  "\" names no parameter");
    of_param[param].emplace_back(std::move(name), t);
  }
  optim::optimizer_state mine;
  mine.metadata = whole.metadata;
  mine.metadata["param_groups.0.params"] = std::to_string(me.shard.size());
  for (size_t k = 0; k < me.shard.size(); ++k) {
    const piece& pc = me.shard[k];
    const tensor& p = me.params[pc.param];
    for (const auto& [name, t] : of_param[pc.param]) {
      ACTORCH_CHECK(t.sizes() == p.sizes() || t.dim() == 0,
                    "train_data_parallel: the sharded step splits parameters and cannot place "
                    "the optimizer state's \"state.",
                    pc.param, ".", name, "\" of shape ", shape_str(t.sizes()),
                    " (the parameter's is ", shape_str(p.sizes()),
                    "); set trainer_spec::zero_redundancy = false");
      mine.tensors.emplace_back(
          "state." + std::to_string(k) + "." + name,
          t.dim() == 0 ? t.clone()
                       : t.contiguous().view({-1}).narrow(0, pc.offset, pc.length).clone());
    }
  }
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
