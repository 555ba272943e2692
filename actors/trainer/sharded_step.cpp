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
// concatenated, scalar ones such as Adam's step taken once).
//
// Note [Sharded step across processes]
// One trainer actor per process, the processes on one host (the group has memory they all map,
// process_group::empty_symmetric): the same step, with three blocks every process maps.
//  - The parameters: rank 0's block holds the one copy. Rank 0 copies its parameters in, and
//    every process's parameters take views of it (set_data), so forward and backward of every
//    process read the same pages and nothing is exchanged after the step, where torch's
//    ZeroRedundancyOptimizer broadcasts every updated shard.
//  - The gradients: each process's block holds its gradients, which the others read. They are
//    the parameters' gradient destinations (Note [Gradient destinations]), so backward writes
//    the large ones (linear's weight gradients) there in the first place and copies the rest
//    in as they arrive; a hook copies any gradient found elsewhere (only its elements outside
//    the process's own run, which the others read) and marks in the `used` block which
//    parameters the process has a gradient for.
//  - A barrier (the group's, through its shared segment); then rank r averages its run from its
//    own .grad and the others' blocks, in rank order and divided once (the bits of the shared-
//    memory all-reduce, which sums block 0's part, block 1's, ... and divides), and steps it;
//    a second barrier.
// A checkpoint gathers every shard's optimizer state to rank 0 (gather_state_entries, as
// consolidate_state_dict). A process that dies leaves the others' barrier failing, not waiting
// (the segment's barriers watch the peers' pids).
#include "actors/trainer/sharded_step.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "base/error.hpp"
#include "comm/ddp/zero_redundancy_optimizer.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
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

sharded_step::~sharded_step() {
  if (!group_)
    return;
  for (const replica& r : replicas_)
    for (const tensor& p : r.params)
      if (p.is_leaf() && p.requires_grad())
        autograd::set_grad_destination(p, tensor());
}

std::vector<sharded_step::piece> sharded_step::pieces_of(const std::vector<tensor>& params, int r,
                                                         int n) {
  // Run r of the elements, [begin, end) over the parameters in order, on 16-element lines.
  int64_t total = 0;
  for (const tensor& p : params)
    total += p.numel();
  const auto boundary = [&](int q) {
    return std::min(total, (total * q / int64_t(n) + 15) / 16 * 16);
  };
  const int64_t begin = boundary(r), end = r + 1 == n ? total : boundary(r + 1);
  std::vector<piece> out;
  int64_t at = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t len = params[k].numel(), from = std::max(begin, at), to = std::min(end, at + len);
    if (from < to)
      out.push_back({k, from - at, to - from, tensor()});
    at += len;
  }
  return out;
}

// Across processes: the parameters into rank 0's block, every process's over it; false (alike
// everywhere) where the group has no such memory or the parameters differ in dtype.
bool sharded_step::map_parameters(replica& me) {
  const dtype dt = me.params.front().dtype();
  mapped_.offsets.assign(1, 0);
  for (const tensor& p : me.params) {
    if (p.dtype() != dt)
      return false;
    mapped_.offsets.push_back(mapped_.offsets.back() + p.numel());
  }
  const int64_t total = mapped_.offsets.back();
  const auto params = group_->empty_symmetric(total, dt);
  const auto grads = group_->empty_symmetric(total, dt);
  const auto used = group_->empty_symmetric(int64_t(me.params.size()), dtype::int32);
  if (!params || !grads || !used)
    return false;
  mapped_.params = params->buffer(0);
  for (int q = 0; q < group_->size(); ++q) {
    mapped_.grads.push_back(grads->buffer(q));
    mapped_.used.push_back(used->buffer(q));
  }
  mapped_.signals = grads;
  // Parameter k's memory: its run of rank 0's buffer, from mapped_.offsets[k].
  const auto slot = [&](size_t k) {
    return mapped_.params.narrow(0, mapped_.offsets[k], me.params[k].numel());
  };
  no_grad guard;
  if (group_->rank() == 0)
    for (size_t k = 0; k < me.params.size(); ++k)
      slot(k).copy_(me.params[k].detach().reshape({-1}));
  mapped_.signals->barrier(); // rank 0's copy is complete
  for (size_t k = 0; k < me.params.size(); ++k)
    me.params[k].set_data(slot(k).view(me.params[k].sizes()));
  return true;
}

std::unique_ptr<optim::optimizer> sharded_step::join(
    int i, nn::module& model,
    const std::function<std::unique_ptr<optim::optimizer>(nn::module&)>& make_optimizer) {
  replica& me = replicas_[size_t(i)];
  me.params = model.parameters();
  ACTORCH_CHECK(!me.params.empty(), "train_data_parallel: the model has no parameters");
  if (group_) {
    active_ = map_parameters(me);
    if (!active_)
      return nullptr;
  } else {
    barrier(); // every replica's parameters are known
    const replica& first = replicas_[0];
    ACTORCH_CHECK(first.params.size() == me.params.size(), "train_data_parallel: replica ", i,
                  " has ", me.params.size(), " parameters, replica 0 ", first.params.size());
    if (i != 0)
      for (size_t k = 0; k < me.params.size(); ++k)
        me.params[k].set_data(first.params[k]);
  }
  const int rank = group_ ? group_->rank() : i;
  const int n = group_ ? group_->size() : int(replicas_.size());
  me.shard = pieces_of(me.params, rank, n);
  if (group_) {
    // Each gradient goes to this process's buffer as soon as backward has accumulated it,
    // while it is still in cache (the part outside its run: the run stays in its .grad).
    mapped_.kept.clear();
    for (const tensor& p : me.params)
      mapped_.kept.emplace_back(p.numel(), p.numel());
    for (const piece& pc : me.shard)
      mapped_.kept[pc.param] = {pc.offset, pc.offset + pc.length};
    // Backward writes each gradient into the process's block in the first place (Note
    // [Gradient destinations]); the hook then only copies what came from elsewhere. The hook
    // outlives this object where the model does, and then does nothing.
    const std::weak_ptr<sharded_step> weak = weak_from_this();
    ACTORCH_INTERNAL_ASSERT(!weak.expired(), "sharded_step: made outside a shared_ptr");
    for (size_t k = 0; k < me.params.size(); ++k) {
      autograd::set_grad_destination(me.params[k], gradient_slot(k, me.params[k]));
      me.params[k].register_post_accumulate_grad_hook([weak, k](const tensor& leaf) {
        if (const auto self = weak.lock())
          self->publish_gradient(k, leaf.grad());
      });
    }
  }
  for (piece& pc : me.shard) {
    pc.view = me.params[pc.param].detach().view({-1}).narrow(0, pc.offset, pc.length);
    pc.view.requires_grad_();
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

void sharded_step::average_piece(piece& pc, const tensor& param, std::vector<tensor>& parts,
                                 size_t own) {
  bool any = false;
  for (const tensor& g : parts)
    any = any || g.defined();
  if (!any) { // no replica used it: no gradient, as with DDP, and the optimizer skips it
    pc.view.set_grad(tensor());
    return;
  }
  // The average goes over this replica's own part of its .grad, which nobody else reads (each
  // replica reads its own run of everyone's): the lines just read are written back, and no
  // buffer of its own is written and read again.
  if (parts[own].defined())
    pc.view.set_grad(parts[own]);
  else if (!pc.view.grad().defined())
    pc.view.set_grad(empty({pc.length}, {.dtype = param.dtype()}));
  for (tensor& g : parts) // a replica that did not use it contributes zeros
    if (!g.defined())
      g = zeros({pc.length}, {.dtype = param.dtype()});
  if (param.dtype() == dtype::float32)
    average_into(pc.view.grad().data_ptr<float>(), pointers<float>(parts), pc.length);
  else
    average_into(pc.view.grad().data_ptr<double>(), pointers<double>(parts), pc.length);
}

void sharded_step::average_shard(int i) {
  replica& me = replicas_[size_t(i)];
  if (group_) {
    average_across_processes(me);
    return;
  }
  barrier(); // every replica's gradients are complete
  no_grad guard;
  for (piece& pc : me.shard) {
    std::vector<tensor> parts;
    for (const replica& r : replicas_) {
      const tensor g = r.params[pc.param].grad();
      parts.push_back(g.defined() ? g.contiguous().view({-1}).narrow(0, pc.offset, pc.length)
                                  : tensor());
    }
    average_piece(pc, me.params[pc.param], parts, size_t(i));
  }
}

tensor sharded_step::gradient_slot(size_t k, const tensor& param) const {
  return mapped_.grads[size_t(group_->rank())]
      .narrow(0, mapped_.offsets[k], param.numel())
      .view(param.sizes());
}

void sharded_step::publish_gradient(size_t k, const tensor& grad) {
  no_grad guard;
  const int rank = group_->rank();
  const tensor flat = grad.contiguous().view({-1});
  const int64_t len = flat.numel(), at = mapped_.offsets[k];
  const tensor& block = mapped_.grads[size_t(rank)];
  if (flat.data_ptr() != block.narrow(0, at, len).data_ptr()) { // not where backward wrote it
    const auto [from, to] = mapped_.kept[k];
    if (from > 0)
      block.narrow(0, at, from).copy_(flat.narrow(0, 0, from));
    if (to < len)
      block.narrow(0, at + to, len - to).copy_(flat.narrow(0, to, len - to));
  }
  mapped_.used[size_t(rank)].data_ptr<int32_t>()[k] = 1;
}

void sharded_step::average_across_processes(replica& me) {
  no_grad guard;
  const int rank = group_->rank(), n = group_->size();
  mapped_.signals->barrier(); // every process's gradients are in place
  for (piece& pc : me.shard) {
    std::vector<tensor> parts;
    for (int q = 0; q < n; ++q) {
      if (mapped_.used[size_t(q)].data_ptr<int32_t>()[pc.param] == 0)
        parts.emplace_back();
      else if (q == rank)
        parts.push_back(
            me.params[pc.param].grad().contiguous().view({-1}).narrow(0, pc.offset, pc.length));
      else
        parts.push_back(
            mapped_.grads[size_t(q)].narrow(0, mapped_.offsets[pc.param] + pc.offset, pc.length));
    }
    average_piece(pc, me.params[pc.param], parts, size_t(rank));
  }
}

void sharded_step::stepped() {
  barrier();
  if (group_) // every process has read this one's gradients: the next backward marks its own
    mapped_.used[size_t(group_->rank())].fill_(0);
}

optim::optimizer_state sharded_step::state_dict(dist::replica_group* group) const {
  // Every shard's entries with its pieces, keyed by (replica, piece index).
  struct shard_entries {
    std::vector<piece> shard;
    std::vector<std::pair<std::string, tensor>> tensors;
  };
  std::vector<shard_entries> shards;
  std::map<std::string, std::string> metadata;
  const std::vector<tensor>& params = replicas_[0].params;
  if (group_) {
    ACTORCH_CHECK(group != nullptr, "sharded_step::state_dict: a collective across processes");
    const replica& me = replicas_[0];
    optim::optimizer_state mine;
    if (me.opt != nullptr)
      mine = me.opt->state_dict();
    auto gathered = dist::gather_state_entries(*group, mine.tensors, 0);
    if (group->rank() != 0)
      return {};
    // Rank 0's shard is never empty (its run starts at element 0), so it has the metadata.
    metadata = std::move(mine.metadata);
    for (int r = 0; r < group->size(); ++r)
      shards.push_back({pieces_of(params, r, group->size()), std::move(gathered[size_t(r)])});
  } else {
    for (const replica& r : replicas_) {
      if (r.opt == nullptr)
        continue;
      optim::optimizer_state mine = r.opt->state_dict();
      if (metadata.empty())
        metadata = std::move(mine.metadata);
      shards.push_back({r.shard, std::move(mine.tensors)});
    }
  }
  // Each parameter's entries from its pieces: an entry shaped as the piece is elementwise and
  // goes to the piece's run of the parameter's; any other (a 0-d step count) is per parameter,
  // the same in every piece, and taken once.
  std::map<std::pair<size_t, std::string>, tensor> whole;
  for (const shard_entries& s : shards)
    for (const auto& [key, t] : s.tensors) {
      const auto [k, name] = dist::split_state_key(key);
      const piece& pc = s.shard.at(k);
      auto [it, fresh] = whole.try_emplace({pc.param, name});
      if (t.sizes() == shape_t{pc.length}) {
        if (fresh)
          it->second = empty(params[pc.param].sizes(), {.dtype = t.dtype()});
        it->second.view({-1}).narrow(0, pc.offset, pc.length).copy_(t);
      } else if (fresh) {
        it->second = t.clone();
      }
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
  if (group_) {
    mapped_.signals->barrier();
    return;
  }
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
