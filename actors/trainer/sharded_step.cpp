// Note [Sharded step]
// ~~~~~~~~~~~~~~~~~~~
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
//  - after backward, each replica's pieces are averaged over every replica's .grad (in replica
//    order, divided once: the bits the in-place all-reduce gives), by whichever replica is free
//    (Note [Shared averaging]), and it steps them; a barrier, and the next forward reads every
//    piece stepped.
// Per replica and step that is one read of every replica's gradients over 1/N of the elements
// and one write of them, in parallel on every trainer thread, and 1/N of the optimizer step;
// nothing is exchanged after the step. The results are the unsharded job's, bit for bit (a test
// checks). A checkpoint's optimizer state is reassembled per parameter (elementwise entries
// concatenated, scalar ones such as Adam's step taken once).
//
// Note [Sharded step across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// One trainer actor per process, the processes on one host (the group has memory they all map,
// process_group::empty_symmetric): the same step, with three blocks every process maps.
//  - The parameters: rank 0's block holds the one copy. Rank 0 copies its parameters in, and
//    every process's parameters take views of it (set_data), so forward and backward of every
//    process read the same pages and nothing is exchanged after the step, where torch's
//    ZeroRedundancyOptimizer broadcasts every updated shard.
//  - The gradients: each process's block holds its gradients, which the others read. They are
//    the parameters' gradient destinations (Note [Gradient destinations]), so backward writes
//    the large ones (linear's weight gradients) there in the first place; a hook copies any
//    gradient found elsewhere and marks the parameter's gradient complete.
//  - Rank r's run is averaged from every process's block, in rank order and divided once (the
//    bits of the shared-memory all-reduce, which sums block 0's part, block 1's, ... and
//    divides), by whichever process is free (Note [Shared averaging]), and r steps it; a
//    barrier (the group's, through its shared segment).
// A checkpoint gathers every shard's optimizer state to rank 0 (gather_state_entries, as
// consolidate_state_dict). A process that dies leaves the others' barrier failing, not waiting
// (the segment's barriers watch the peers' pids).
//
// Note [Shared averaging]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The first barrier above cost more than it had to. The replicas' backward passes rarely end
// together (a 1024-wide MLP's differed by 0.1-0.4 ms of a 4.3 ms backward), and the first to
// end waited at the barrier while the last, after its backward, still averaged its whole
// shard: that replica's time is the step's. Yet averaging a run needs only that every
// replica's gradient of that parameter is complete, and backward completes the last layers'
// first. So each shard's averaging is split into items (runs of at most 16384 elements of one
// piece) listed in the order backward completes them (the parameters from the last), and a
// replica whose backward has ended takes items in turn: the next of its own shard when every
// replica's gradients for it are complete, otherwise the next of another shard that is, and
// waits only when none is. It averages the item into its owner's gradient; then it waits
// until every item of its own shard is done (by whoever) and steps it. The replica that ends
// its backward first thus averages the others' items while it would have waited, and the
// last one has less left; when they end together each averages its own, as before (the
// owner writing its own lines, which its step reads next). Each item's average is computed
// as before (replica order, divided once), so the bits do not change.
//  - A replica's hook marks parameter k's gradient complete in this step (its word ready[k]
//    = the step's number; in one process after saving the gradient's flat handle, across
//    processes after copying it into the process's block where backward wrote it elsewhere).
//    The end of its backward marks them all (done = the step's number): a parameter not marked
//    by then has no gradient from it, and counts as zeros. In one process the owner of a piece
//    it has no gradient for gives the averagers a spare buffer before it marks its backward
//    done; across processes the average goes to its block, which is there either way.
//  - Shard r's items are claimed from a counter of r's (compare-and-set, only when the item is
//    ready), and a counter of r's counts those averaged; both grow by r's item count each step,
//    never reset (the barrier after the steps orders one step's claims before the next's).
//  - The words are std::atomic_ref'd: marks released after the gradients (or the average) are
//    written, acquired before they are read. Across processes they are in memory every process
//    maps, beside each process's pid. A replica waits spinning briefly, then in short naps, and
//    fails where the barrier would: another replica aborted, a peer's process exited, or the
//    group's timeout passed.
#include "actors/trainer/sharded_step.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <unistd.h>

#include "base/cpu_relax.hpp"
#include "base/error.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/ddp/zero_redundancy_optimizer.hpp"
#include "comm/host_identity.hpp"
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

// Note [Shared averaging]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The longest run of a piece that one replica averages at a time.
constexpr int64_t kItemElements = 16384;

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
  const auto words = group_->empty_symmetric(int64_t(word_count()), dtype::int64);
  if (!params || !grads || !words)
    return false;
  mapped_.params = params->buffer(0);
  for (int q = 0; q < group_->size(); ++q) {
    mapped_.grads.push_back(grads->buffer(q));
    mapped_.words.push_back(words->buffer(q));
  }
  mapped_.signals = grads;
  if (const auto* gloo = dynamic_cast<const dist::process_group_gloo*>(group_.get()))
    mapped_.timeout = gloo->timeout();
  pid_word(size_t(group_->rank()))
      .store(::getpid(), std::memory_order_relaxed); // before the barrier
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
  // Note [Shared averaging]
  // ~~~~~~~~~~~~~~~~~~~~~~~
  // Every shard's items, by shard (in one process replica 0 lists
  // them for all, read after the barrier below).
  if (group_ || i == 0) {
    work_.assign(size_t(n), {});
    for (int r = 0; r < n; ++r) {
      const std::vector<piece> shard = pieces_of(me.params, r, n);
      for (size_t k = me.params.size(); k-- > 0;)
        for (size_t j = 0; j < shard.size(); ++j)
          if (shard[j].param == k)
            for (int64_t from = 0; from < shard[j].length; from += kItemElements)
              work_[size_t(r)].push_back(
                  {k, j, shard[j].offset + from, std::min(kItemElements, shard[j].length - from)});
    }
  }
  if (!group_) {
    me.flat.assign(me.params.size(), tensor());
    me.spare.assign(me.shard.size(), tensor());
    me.words.assign(word_count(), 0);
  } else {
    // Backward writes each gradient into the process's block in the first place (Note
    // [Gradient destinations]); the hook then only copies what came from elsewhere.
    for (size_t k = 0; k < me.params.size(); ++k)
      autograd::set_grad_destination(me.params[k], gradient_slot(k, me.params[k]));
  }
  // The hook outlives this object where the model does, and then does nothing.
  const std::weak_ptr<sharded_step> weak = weak_from_this();
  ACTORCH_INTERNAL_ASSERT(!weak.expired(), "sharded_step: made outside a shared_ptr");
  for (size_t k = 0; k < me.params.size(); ++k)
    if (me.params[k].requires_grad())
      me.params[k].register_post_accumulate_grad_hook([weak, i, k](const tensor& leaf) {
        if (const auto self = weak.lock())
          self->mark_ready(i, k, leaf.grad());
      });
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

int64_t& sharded_step::word(size_t q, size_t index) {
  return group_ ? mapped_.words[q].data_ptr<int64_t>()[index] : replicas_[q].words[index];
}

size_t sharded_step::replica_count() const {
  return group_ ? size_t(group_->size()) : replicas_.size();
}

size_t sharded_step::index_of(int i) const {
  return group_ ? size_t(group_->rank()) : size_t(i);
}

void sharded_step::mark_ready(int i, size_t k, const tensor& grad) {
  if (!grad.defined())
    return;
  replica& me = replicas_[size_t(i)];
  no_grad guard;
  const tensor flat = grad.contiguous().view({-1});
  if (group_) {
    tensor slot = mapped_.grads[index_of(i)].narrow(0, mapped_.offsets[k], flat.numel());
    if (flat.data_ptr() != slot.data_ptr()) // not where backward wrote it
      slot.copy_(flat);
  } else {
    me.flat[k] = flat;
  }
  ready_word(index_of(i), k).store(me.steps + 1, std::memory_order_release);
}

bool sharded_step::complete(size_t k, int64_t step) {
  for (size_t q = 0; q < replica_count(); ++q)
    if (ready_word(q, k).load(std::memory_order_acquire) != step &&
        done_word(q).load(std::memory_order_acquire) != step)
      return false;
  return true;
}

const sharded_step::work_item* sharded_step::next_item(size_t r, int64_t step, int64_t& claims) {
  claims = claims_word(r).load(std::memory_order_acquire);
  const int64_t at = claims - (step - 1) * int64_t(work_[r].size());
  return at < int64_t(work_[r].size()) ? &work_[r][size_t(at)] : nullptr;
}

bool sharded_step::any_item_ready(int64_t step, bool& left) {
  left = false;
  for (size_t r = 0; r < replica_count(); ++r) {
    int64_t claims = 0;
    if (const work_item* w = next_item(r, step, claims)) {
      left = true;
      if (complete(w->param, step))
        return true;
    }
  }
  return false;
}

template <class Ready> void sharded_step::wait_until(const Ready& ready) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + mapped_.timeout;
  auto next_look = clock::now(); // a dead peer fails the first nap's look
  for (uint32_t spins = 0; !ready(); ++spins) {
    if (aborting_.load(std::memory_order_acquire)) {
      std::lock_guard lock(mu_);
      std::rethrow_exception(aborted_);
    }
    if (spins < 2048) {
      cpu_relax();
      continue;
    }
    if (spins < 4096) {
      std::this_thread::yield(); // the replica waited for may be queued on this CPU
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    if (!group_ || clock::now() < next_look)
      continue;
    next_look = clock::now() + std::chrono::milliseconds(50);
    for (size_t q = 0; q < replica_count(); ++q) {
      const auto p = pid_t(pid_word(q).load(std::memory_order_relaxed));
      ACTORCH_CHECK(q == index_of(0) || !dist::process_exited(p), "train_data_parallel: rank ", q,
                    " (pid ", p,
                    ") has exited, found while the sharded step waited for its gradients");
    }
    ACTORCH_CHECK(clock::now() < deadline, "train_data_parallel: the sharded step waited ",
                  mapped_.timeout.count(),
                  " ms (the group's timeout) for another rank's gradients");
  }
}

template <class T> void sharded_step::average_item(size_t r, const work_item& w, int64_t step) {
  const size_t k = w.param, n = replica_count();
  const auto marked = [&](size_t q) {
    return ready_word(q, k).load(std::memory_order_acquire) == step;
  };
  // Called once every replica's gradient of k is final (complete()): marked, or absent (its
  // backward ended without it). Replica q's gradient of k, at the item's first element:
  const auto grad = [&](size_t q) -> T* {
    return group_ ? mapped_.grads[q].data_ptr<T>() + mapped_.offsets[k] + w.at
                  : replicas_[q].flat[k].template data_ptr<T>() + w.at;
  };
  std::vector<const T*> parts(n, nullptr);
  bool any = false;
  for (size_t q = 0; q < n; ++q)
    if (marked(q)) {
      parts[q] = grad(q);
      any = true;
    }
  if (any) {
    // Into the owner's gradient; in one process a spare where it has none (its block, across
    // processes, is there either way).
    T* dst = group_ || marked(r) ? grad(r)
                                 : replicas_[r].spare[w.piece].template data_ptr<T>() +
                                       (w.at - replicas_[r].shard[w.piece].offset);
    tensor zero; // a replica without a gradient of the parameter contributes zeros
    for (const T*& p : parts)
      if (p == nullptr) {
        if (!zero.defined())
          zero = zeros({w.length}, {.dtype = dtype_of<T>()});
        p = zero.template data_ptr<T>();
      }
    average_into(dst, parts, w.length);
  }
  averaged_word(r).fetch_add(1, std::memory_order_release);
}

void sharded_step::average_shard(int i) {
  replica& me = replicas_[size_t(i)];
  const size_t self = index_of(i), n = replica_count();
  const int64_t step = ++me.steps;
  no_grad guard;
  const auto marked = [&](size_t q, size_t k) {
    return ready_word(q, k).load(std::memory_order_acquire) == step;
  };
  // In one process a piece this replica has no gradient of gets the others' average in a
  // spare, made before its backward is marked done (which the averagers wait for).
  if (!group_)
    for (size_t j = 0; j < me.shard.size(); ++j)
      if (!marked(self, me.shard[j].param) && !me.spare[j].defined())
        me.spare[j] = empty({me.shard[j].length}, {.dtype = me.params[me.shard[j].param].dtype()});
  done_word(self).store(step, std::memory_order_release);
  // Items in turn, this replica's shard first (Note [Shared averaging]): a claim is taken only
  // for a ready item; when no shard's next item is ready, wait until one is or none is left.
  for (bool left = true; left;) {
    bool took = false;
    for (size_t o = 0; o < n && !took; ++o) {
      const size_t r = (self + o) % n;
      int64_t claims = 0;
      const work_item* w = next_item(r, step, claims);
      if (w == nullptr || !complete(w->param, step) ||
          !claims_word(r).compare_exchange_strong(claims, claims + 1, std::memory_order_acq_rel))
        continue;
      took = true;
      if (me.params[w->param].dtype() == dtype::float32)
        average_item<float>(r, *w, step);
      else
        average_item<double>(r, *w, step);
      if (r != self)
        ++me.for_others;
    }
    if (!took) // each shard's next item waits for a replica's backward, or none is left
      wait_until([&] { return any_item_ready(step, left) || !left; });
  }
  const int64_t mine = step * int64_t(work_[self].size());
  wait_until([&] { return averaged_word(self).load(std::memory_order_acquire) >= mine; });
  for (size_t j = 0; j < me.shard.size(); ++j) {
    piece& pc = me.shard[j];
    bool any = false;
    for (size_t q = 0; q < n; ++q)
      any = any || marked(q, pc.param);
    if (!any) // no replica used it: no gradient, as with DDP, and the optimizer skips it
      pc.view.set_grad(tensor());
    else if (group_)
      pc.view.set_grad(
          mapped_.grads[self].narrow(0, mapped_.offsets[pc.param] + pc.offset, pc.length));
    else if (marked(self, pc.param))
      pc.view.set_grad(me.flat[pc.param].narrow(0, pc.offset, pc.length));
    else
      pc.view.set_grad(me.spare[j]);
  }
}

tensor sharded_step::gradient_slot(size_t k, const tensor& param) const {
  return mapped_.grads[size_t(group_->rank())]
      .narrow(0, mapped_.offsets[k], param.numel())
      .view(param.sizes());
}

void sharded_step::stepped(int i) {
  barrier();
  if (!group_) // every replica has read this one's gradients: they go with the next zero_grad
    std::fill(replicas_[size_t(i)].flat.begin(), replicas_[size_t(i)].flat.end(), tensor());
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
  aborting_.store(true, std::memory_order_release);
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
