// Recording the graph (record, edges, accumulate_grad) and the tensor methods of autograd.
#include <algorithm>

#include "core/autograd/engine.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/reduce.hpp"

namespace actorch {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
// The node whose backward function runs on this thread (see needs_input_grad).
thread_local const node* t_running = nullptr;

autograd_meta& meta_of(const tensor& t) {
  tensor_impl& impl = *t.impl_ptr(); // the handle is const, the state behind it is not
  if (!impl.autograd)
    impl.autograd = std::make_shared<autograd_meta>();
  return *impl.autograd;
}

const autograd_meta* find_meta(const tensor& t) {
  return t.impl_ptr()->autograd.get();
}

// Note [Gradient destinations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// DDP's buckets and the sharded step's gradient blocks are memory other replicas read, so a
// gradient that backward leaves in memory of its own has to be copied there: a read and a
// write of every gradient per step, on a step that is mostly memory traffic. A destination
// lets backward produce the gradient there in the first place. The leaf keeps it in its
// autograd_meta; its sink (accumulate_grad) hands it out once per backward, to the first op
// that asks for its input's gradient and can write it in place (linear's weight gradient, as
// a GEMM with beta 0), and only while the leaf's .grad is undefined, since a defined one must
// be added to. When the gradient arrives, the sink makes the destination the leaf's .grad:
// as is if the gradient is already in it, copied into it otherwise (another op made it, or
// the engine summed two gradients of a leaf used twice). The claim is what keeps a leaf used
// by two ops correct: only one of them writes into the destination, and the engine sums the
// two results out of place before the sink copies the sum. A backward that fails between the
// claim and the sink leaves the claim taken; the next gradient to reach the sink clears it, so
// that backward only loses the in-place write. Only the owner of the memory knows when
// nobody reads it any more, so setting a destination is the owner's promise that backward may
// overwrite it whenever the leaf's .grad is undefined.

// The leaf's gradient sink: sums what arrives into leaf.grad, then tells the hooks.
class accumulate_grad final : public node {
public:
  explicit accumulate_grad(std::shared_ptr<tensor_impl> leaf) : leaf_(std::move(leaf)) {
    inputs.push_back({leaf_->dtype, leaf_->sizes});
  }
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<tensor> apply(std::vector<tensor>&& grads) override {
    tensor leaf(leaf_);
    tensor& incoming = grads.at(0);
    if (!incoming.defined())
      return {};
    autograd_meta& m = meta_of(leaf);
    destination_claimed_.store(false, std::memory_order_relaxed);
    tensor dest = usable_destination(leaf, m);
    if (!m.grad.defined() && dest.defined()) {
      if (!occupies(incoming, dest))
        dest.copy_(incoming);
      m.grad = dest;
    } else if (!m.grad.defined()) {
      // Take the incoming buffer when nothing else can see it: no other handle to this tensor
      // (the caller's gradient, or the same gradient sent to a second leaf, as add's backward
      // does) and no other view of its storage. Otherwise keep a copy, so that later in-place
      // accumulation never writes into another tensor's memory.
      const bool exclusive = incoming.impl_ptr().use_count() == 1 &&
                             incoming.storage().use_count() == 1 && incoming.is_contiguous() &&
                             incoming.sizes() == leaf.sizes();
      m.grad = exclusive ? incoming.detach() : incoming.clone();
    } else {
      m.grad.add_(incoming);
    }
    for (const auto& hook : m.post_accumulate_hooks)
      hook(leaf);
    return {};
  }

  // See Note [Gradient destinations].
  tensor claim_destination() {
    tensor leaf(leaf_);
    autograd_meta& m = meta_of(leaf);
    if (m.grad.defined())
      return {};
    tensor dest = usable_destination(leaf, m);
    if (!dest.defined() || destination_claimed_.exchange(true, std::memory_order_relaxed))
      return {};
    return dest;
  }

private:
  // The destination, unless the leaf has changed since it was set (module::to moves a
  // parameter to another device, set_data may give it another shape).
  static tensor usable_destination(const tensor& leaf, const autograd_meta& m) {
    const tensor& d = m.grad_destination;
    if (!d.defined() || d.sizes() != leaf.sizes() || d.dtype() != leaf.dtype() ||
        d.device() != leaf.device())
      return {};
    return d;
  }

  // Whether `t` is exactly the contiguous `dest`: the same first element, shape and strides.
  static bool occupies(const tensor& t, const tensor& dest) {
    return t.data_ptr() == dest.data_ptr() && t.sizes() == dest.sizes() &&
           t.strides() == dest.strides() && t.dtype() == dest.dtype();
  }

  std::shared_ptr<tensor_impl> leaf_;
  std::atomic<bool> destination_claimed_{false};
};

std::shared_ptr<node> grad_accumulator(const tensor& leaf) {
  autograd_meta& m = meta_of(leaf);
  if (auto existing = m.grad_accumulator.lock())
    return existing;
  auto acc = std::make_shared<accumulate_grad>(leaf.impl_ptr());
  m.grad_accumulator = acc;
  return acc;
}

} // namespace

edge autograd::gradient_edge(const tensor& t) {
  const autograd_meta* m = find_meta(t);
  if (!m || !m->requires_grad)
    return {};
  if (m->grad_fn)
    return {m->grad_fn, m->output_nr};
  return {grad_accumulator(t), 0};
}

// Nodes and saved tensors. ---------------------------------------------------------------------

namespace {
std::string freed_graph_message(const std::string& node_name) {
  return node_name + ": trying to backward through the graph a second time (or to use saved "
                     "tensors after they were freed); pass retain_graph=true to the first "
                     "backward if you need to backward twice";
}
} // namespace

node::node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

node::~node() {
  // Dropping the last reference to a long chain would destroy it recursively, one stack frame
  // per node, and a deep graph would overflow the stack. Detach the chain instead and destroy
  // the nodes one at a time, each with its edges already taken away.
  std::vector<std::shared_ptr<node>> chain;
  for (edge& e : next_edges)
    if (e.fn)
      chain.push_back(std::move(e.fn));
  while (!chain.empty()) {
    std::shared_ptr<node> n = std::move(chain.back());
    chain.pop_back();
    if (n.use_count() == 1) {
      for (edge& e : n->next_edges)
        if (e.fn)
          chain.push_back(std::move(e.fn));
      n->next_edges.clear();
    }
  }
}

saved_variable::saved_variable(const tensor& t)
    : data_(t), version_(t.defined() ? t.storage()->version() : 0), saved_(true) {}

tensor saved_variable::unpack(const std::string& node_name) const {
  ACTORCH_CHECK(saved_, freed_graph_message(node_name));
  if (data_.defined())
    ACTORCH_CHECK(data_.storage()->version() == version_, node_name,
                  ": a tensor saved for backward (shape ", shape_str(data_.sizes()),
                  ") has been modified by an in-place operation (version ", version_, " -> ",
                  data_.storage()->version(), ")");
  return data_;
}

void saved_variable::reset() {
  data_ = tensor();
  saved_ = false;
}

namespace autograd {

std::vector<tensor> function_node::apply(std::vector<tensor>&& grads) {
  if (std::none_of(grads.begin(), grads.end(), [](const tensor& g) { return g.defined(); }))
    return std::vector<tensor>(next_edges.size()); // nothing flowed into this node
  ACTORCH_CHECK(!released_, freed_graph_message(name_));
  std::vector<tensor> saved;
  saved.reserve(saved_.size());
  for (const auto& s : saved_)
    saved.push_back(s.unpack(name_));
  const node* outer = t_running;
  t_running = this;
  struct restore {
    const node* prev;
    ~restore() { t_running = prev; }
  } guard{outer};
  return fn_(grads, saved);
}

void function_node::release_variables() {
  for (auto& s : saved_)
    s.reset();
  released_ = true;
}

bool needs_input_grad(size_t i) {
  return t_running == nullptr || (i < t_running->next_edges.size() && t_running->next_edges[i].fn);
}

void set_grad_destination(const tensor& leaf, tensor dest) {
  ACTORCH_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
                "set_grad_destination: the tensor must be a leaf that requires grad");
  if (dest.defined()) {
    ACTORCH_CHECK(dest.sizes() == leaf.sizes() && dest.dtype() == leaf.dtype() &&
                      dest.device() == leaf.device(),
                  "set_grad_destination: the destination (", shape_str(dest.sizes()), ", ",
                  dtype_name(dest.dtype()), ", ", dest.device().str(),
                  ") must have the leaf's shape, dtype and device (", shape_str(leaf.sizes()), ", ",
                  dtype_name(leaf.dtype()), ", ", leaf.device().str(), ")");
    ACTORCH_CHECK(dest.is_contiguous(), "set_grad_destination: the destination of shape ",
                  shape_str(dest.sizes()), " must be contiguous");
    ACTORCH_CHECK(!dest.requires_grad(),
                  "set_grad_destination: the destination must not require grad");
  }
  meta_of(leaf).grad_destination = std::move(dest);
}

tensor grad_destination(const tensor& leaf) {
  const autograd_meta* m = find_meta(leaf);
  return m ? m->grad_destination : tensor();
}

tensor input_grad_destination(size_t i) {
  if (t_running == nullptr || i >= t_running->next_edges.size())
    return {};
  auto* sink = dynamic_cast<accumulate_grad*>(t_running->next_edges[i].fn.get());
  return sink != nullptr ? sink->claim_destination() : tensor();
}

bool needs_grad(std::initializer_list<const tensor*> inputs) {
  if (!grad_enabled())
    return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const tensor* t) { return t->defined() && t->requires_grad(); });
}

bool needs_grad(const std::vector<tensor>& inputs) {
  if (!grad_enabled())
    return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const tensor& t) { return t.defined() && t.requires_grad(); });
}

void record(tensor& out, const char* name, const std::vector<const tensor*>& inputs,
            std::vector<tensor> saved, function_node::backward_fn fn) {
  std::vector<saved_variable> sv;
  sv.reserve(saved.size());
  for (const tensor& t : saved)
    sv.emplace_back(t);
  auto n = std::make_shared<function_node>(name, std::move(fn), std::move(sv));
  for (const tensor* in : inputs) {
    n->next_edges.push_back(gradient_edge(*in));
    n->inputs.push_back({in->dtype(), in->sizes(), in->device()});
  }
  autograd_meta& m = meta_of(out);
  m.requires_grad = true;
  m.grad_fn = std::move(n);
  m.output_nr = 0;
}

tensor sum_to(const tensor& grad, const shape_t& shape) {
  if (grad.sizes() == shape)
    return grad;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  shape_t dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && grad.size(d) != 1))
      dims.push_back(d);
  tensor r = dims.empty() ? grad : sum(grad, dims, true);
  return r.reshape(shape);
}

void check_in_place(const tensor& out, const char* op,
                    std::initializer_list<const tensor*> inputs) {
  if (!grad_enabled())
    return;
  if (out.requires_grad()) {
    ACTORCH_CHECK(!out.is_leaf(), op,
                  ": a leaf tensor that requires grad is being used in an in-place operation; "
                  "wrap the update in actorch::no_grad");
    ACTORCH_FAIL(op, ": in-place operations on tensors that are part of the autograd graph are "
                     "not supported; use the out-of-place form");
  }
  for (const tensor* in : inputs)
    ACTORCH_CHECK(!in->defined() || !in->requires_grad(), op,
                  ": an in-place operation with an input that requires grad is not supported "
                  "(the result would need a graph); use the out-of-place form");
}

} // namespace autograd

// Tensor methods. ------------------------------------------------------------------------------

bool tensor::requires_grad() const {
  const autograd_meta* m = find_meta(*this);
  return m && m->requires_grad;
}

tensor& tensor::requires_grad_(bool r) {
  ACTORCH_CHECK(is_leaf(), "requires_grad_: can only change requires_grad of leaf tensors; use "
                           "detach() to get a leaf from a non-leaf");
  ACTORCH_CHECK(!r || is_floating_point(),
                "requires_grad_: only floating point tensors can "
                "require gradients, but got ",
                dtype_name(dtype()));
  meta_of(*this).requires_grad = r;
  return *this;
}

tensor tensor::grad() const {
  const autograd_meta* m = find_meta(*this);
  return m ? m->grad : tensor();
}

void zero_grads(const std::vector<tensor>& params, bool set_to_none) {
  for (tensor p : params) {
    if (set_to_none) {
      p.set_grad({});
    } else if (p.grad().defined()) {
      tensor g = p.grad();
      g.zero_();
    }
  }
}

void tensor::set_grad(const tensor& g) {
  if (g.defined())
    ACTORCH_CHECK(g.sizes() == sizes() && g.dtype() == dtype(), "set_grad: gradient of shape ",
                  shape_str(g.sizes()), " and dtype ", dtype_name(g.dtype()),
                  " does not match the tensor's ", shape_str(sizes()), " ", dtype_name(dtype()));
  meta_of(*this).grad = g;
}

void tensor::set_data(const tensor& src) {
  ACTORCH_CHECK(src.defined() && src.dtype() == dtype() && src.sizes() == sizes() &&
                    src.device() == device(),
                "set_data: the source (", src.defined() ? dtype_name(src.dtype()) : "undefined",
                " ", src.defined() ? shape_str(src.sizes()) : "",
                ") must have this tensor's "
                "dtype, shape and device (",
                dtype_name(dtype()), " ", shape_str(sizes()), " on ", device().str(), ")");
  tensor_impl& mine = impl();
  const tensor_impl& theirs = src.impl();
  mine.storage = theirs.storage;
  mine.strides = theirs.strides;
  mine.offset = theirs.offset;
}

const std::shared_ptr<node>& tensor::grad_fn() const {
  static const std::shared_ptr<node> none;
  const autograd_meta* m = find_meta(*this);
  return m ? m->grad_fn : none;
}

bool tensor::is_leaf() const {
  return grad_fn() == nullptr;
}

tensor tensor::detach() const {
  auto impl = std::make_shared<tensor_impl>(*impl_ptr());
  impl->autograd = nullptr;
  return tensor(std::move(impl));
}

void tensor::register_post_accumulate_grad_hook(std::function<void(const tensor&)> hook) {
  ACTORCH_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only leaf "
                                              "tensors that require grad have gradients to "
                                              "accumulate");
  meta_of(*this).post_accumulate_hooks.push_back(std::move(hook));
}

void tensor::backward(const tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

} // namespace actorch
