// Note [Backward engine]
// ~~~~~~~~~~~~~~~~~~~~~~
// backward() runs on the calling thread, without recursion, so graphs of any depth work:
//   1. walk the graph from the roots with an explicit stack, counting for every node how many
//      edges point at it (its dependencies);
//   2. seed the roots' input buffers with their gradients;
//   3. repeatedly take the ready node (all dependencies delivered) with the highest sequence
//      number, i.e. the one created last in the forward pass, as PyTorch's engine does, run it,
//      and add each gradient it returns into the buffer of the node its edge points at.
// Because leaves' accumulate_grad nodes run as soon as their last dependency is delivered,
// a parameter's post-accumulate hooks fire in the middle of backward, right when its gradient
// is complete: what DistributedDataParallel's bucketing needs.
#include "core/autograd/engine.hpp"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"

namespace actorch::autograd {

namespace {

// Callbacks queued by the backward running on this thread; null outside backward.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

struct later_first {
  bool operator()(const node* a, const node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// A gradient for input i of `fn`, made to match the input's dtype and device (PyTorch's
// validate_outputs) and checked for its shape.
tensor validate(const node& fn, size_t i, tensor g) {
  const input_meta& meta = fn.inputs.at(i);
  if (!g.defined())
    return g;
  ACTORCH_INTERNAL_ASSERT(g.sizes() == meta.shape, fn.name(), " returned a gradient of shape ",
                          shape_str(g.sizes()), " for input ", i, " of shape ",
                          shape_str(meta.shape));
  if (meta.device && g.device() != *meta.device)
    g = g.to(*meta.device);
  return g.dtype() == meta.dtype ? g : g.to(meta.dtype);
}

} // namespace

void backward(const std::vector<tensor>& roots, const std::vector<tensor>& grads,
              bool retain_graph) {
  ACTORCH_CHECK(roots.size() == grads.size(), "backward: got ", roots.size(), " tensors but ",
                grads.size(), " gradients");
  no_grad guard; // backward itself records nothing (no create_graph)
  // Callbacks queued while this call runs its nodes; dropped if a node throws.
  std::vector<std::function<void()>> callbacks;
  auto* const outer_callbacks = current_callbacks;
  current_callbacks = &callbacks;
  struct restore {
    std::vector<std::function<void()>>* prev;
    ~restore() { current_callbacks = prev; }
  } restore_callbacks{outer_callbacks};

  // Root edges and their seed gradients. A leaf root's edge is its accumulate_grad node, so
  // it accumulates (and fires its hooks) like any other leaf.
  std::vector<std::pair<edge, tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const tensor& r = roots[i];
    ACTORCH_CHECK(r.defined(), "backward: root ", i, " is undefined");
    ACTORCH_CHECK(r.requires_grad(), "backward: element ", i,
                  " of tensors does not require grad and does not have a grad_fn");
    tensor g = grads[i];
    if (!g.defined()) {
      ACTORCH_CHECK(r.numel() == 1,
                    "backward: grad can be implicitly created only for scalar "
                    "outputs, but the output has shape ",
                    shape_str(r.sizes()));
      g = ones_like(r);
    } else {
      ACTORCH_CHECK(g.sizes() == r.sizes(), "backward: gradient of shape ", shape_str(g.sizes()),
                    " does not match the output's shape ", shape_str(r.sizes()));
    }
    seeds.emplace_back(gradient_edge(r), std::move(g));
  }

  // 1. Dependencies of every reachable node. The roots own the graph for the whole call, so
  //    raw pointers to its nodes stay valid.
  std::unordered_map<node*, int> deps;
  std::unordered_set<node*> seen;
  std::vector<node*> stack;
  for (const auto& [e, g] : seeds)
    if (seen.insert(e.fn.get()).second)
      stack.push_back(e.fn.get());
  while (!stack.empty()) {
    node* n = stack.back();
    stack.pop_back();
    for (const edge& next : n->next_edges) {
      if (!next.fn)
        continue;
      ++deps[next.fn.get()];
      if (seen.insert(next.fn.get()).second)
        stack.push_back(next.fn.get());
    }
  }

  // 2. Seed the roots' buffers; queue each root node once, unless another root leads to it.
  std::unordered_map<node*, std::vector<tensor>> buffers;
  auto deliver = [&](const edge& e, tensor g) {
    auto& buf = buffers[e.fn.get()];
    if (buf.empty())
      buf.resize(e.fn->num_outputs);
    tensor& slot = buf.at(e.input_nr);
    slot = slot.defined() ? slot.add(g) : std::move(g);
  };
  std::priority_queue<node*, std::vector<node*>, later_first> ready;
  std::unordered_set<node*> queued;
  for (auto& [e, g] : seeds) {
    deliver(e, std::move(g));
    if (deps[e.fn.get()] == 0 && queued.insert(e.fn.get()).second)
      ready.push(e.fn.get());
  }

  // 3. Run nodes in dependency order, latest-created first among the ready ones.
  while (!ready.empty()) {
    node* n = ready.top();
    ready.pop();
    std::vector<tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    if (in.empty())
      in.resize(n->num_outputs);
    std::vector<tensor> out = n->apply(std::move(in));
    if (!retain_graph)
      n->release_variables();
    ACTORCH_INTERNAL_ASSERT(out.empty() || out.size() == n->next_edges.size(), n->name(),
                            " returned ", out.size(), " gradients for ", n->next_edges.size(),
                            " inputs");
    for (size_t i = 0; i < out.size(); ++i) {
      const edge& e = n->next_edges[i];
      if (!e.fn)
        continue;
      tensor g = validate(*n, i, std::move(out[i]));
      if (g.defined())
        deliver(e, std::move(g));
      if (--deps[e.fn.get()] == 0)
        ready.push(e.fn.get());
    }
  }

  // 4. Final callbacks; one may queue another.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);
    fn();
  }
}

void queue_callback(std::function<void()> fn) {
  ACTORCH_CHECK(current_callbacks != nullptr,
                "queue_callback: called outside a backward pass (no engine is running on this "
                "thread)");
  current_callbacks->push_back(std::move(fn));
}

} // namespace actorch::autograd
