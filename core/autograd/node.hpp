// The autograd graph. Every op that takes an input requiring grad records a node: the backward
// function of that op, with one edge per forward input pointing at the node that produced it
// (or at the leaf's accumulate_grad node). See Note [Backward engine] in engine.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace actorch {

struct edge {
  std::shared_ptr<node> fn; // null: this input needs no gradient
  uint32_t input_nr = 0;    // which output of fn's forward op the gradient belongs to
};

/// A forward input's dtype and shape: the engine checks and casts gradients against them.
struct input_meta {
  actorch::dtype dtype;
  shape_t shape;
  /// The engine moves a gradient made on another device here; unset for a leaf's sink, whose
  /// tensor may move (module::to) after the sink was made.
  std::optional<actorch::device> device{};
};

struct node {
  node();
  /// Releases the chain of nodes behind this one iteratively (see autograd.cpp).
  virtual ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  /// Gradients w.r.t. the forward inputs, given gradients w.r.t. the forward outputs (an
  /// undefined tensor where an output got none). One result per next_edges entry.
  virtual std::vector<tensor> apply(std::vector<tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors once backward no longer needs them (retain_graph=false).
  virtual void release_variables() {}

  std::vector<edge> next_edges;
  std::vector<input_meta> inputs;
  uint32_t num_outputs = 1;
  /// Creation order; the engine runs ready nodes latest first, as PyTorch does.
  const uint64_t sequence_nr;
};

/// A tensor saved for backward, with the storage version it had when saved.
class saved_variable {
public:
  saved_variable() = default;
  explicit saved_variable(const tensor& t);
  /// The saved tensor; throws if it was released or modified in place since it was saved.
  tensor unpack(const std::string& node_name) const;
  void reset();

private:
  tensor data_;
  uint64_t version_ = 0;
  bool saved_ = false;
};

/// The per-tensor autograd state, hanging off tensor_impl.
struct autograd_meta {
  bool requires_grad = false;
  tensor grad;
  std::shared_ptr<node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<node> grad_accumulator;
  std::vector<std::function<void(const tensor&)>> post_accumulate_hooks;
  tensor grad_destination; // set_grad_destination's, or undefined
};

namespace autograd {

/// A node whose backward is a function of the output gradients and the saved tensors.
class function_node final : public node {
public:
  using backward_fn = std::function<std::vector<tensor>(const std::vector<tensor>& grads,
                                                        const std::vector<tensor>& saved)>;
  function_node(std::string name, backward_fn fn, std::vector<saved_variable> saved)
      : name_(std::move(name)), fn_(std::move(fn)), saved_(std::move(saved)) {}
  std::vector<tensor> apply(std::vector<tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;

private:
  std::string name_;
  backward_fn fn_;
  std::vector<saved_variable> saved_;
  bool released_ = false;
};

/// Where t's gradient goes: its grad_fn (for an op's result), its accumulate_grad node (for a
/// leaf that requires grad), or nowhere (an empty edge).
edge gradient_edge(const tensor& t);

/// Inside a backward function: whether the node's input `i` needs a gradient (its edge leads
/// somewhere). Lets a backward skip work, e.g. the gradient of a layer's input batch.
bool needs_input_grad(size_t i);

/// Where backward puts `leaf`'s gradient when it starts afresh (its .grad undefined): the
/// gradient is written into `dest`, by the op that computes it where that op can (linear's
/// weight gradient), copied there otherwise, and `dest` becomes the leaf's .grad. For owners
/// of gradient memory that others read, such as DDP's buckets; see Note [Gradient
/// destinations]. An undefined `dest` removes it. @pre dest has the leaf's shape, dtype and
/// device and is contiguous (checked).
void set_grad_destination(const tensor& leaf, tensor dest);

/// `leaf`'s gradient destination, or an undefined tensor.
tensor grad_destination(const tensor& leaf);

/// Inside a backward function: the memory to write input `i`'s gradient into, when that
/// gradient goes straight to a leaf with a destination and is the first to reach it in this
/// backward; undefined otherwise. A defined result is claimed: the caller must write the
/// whole gradient into it (beta = 0) and return it as the input's gradient.
tensor input_grad_destination(size_t i);

/// True when grad mode is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<const tensor*> inputs);
bool needs_grad(const std::vector<tensor>& inputs);

/// Records `out = op(inputs)`: builds a function_node named `name` whose backward is `fn`,
/// saving `saved` for it, and makes it out's grad_fn. Call only when needs_grad(inputs).
void record(tensor& out, const char* name, const std::vector<const tensor*>& inputs,
            std::vector<tensor> saved, function_node::backward_fn fn);

/// `grad` summed over the dims that broadcasting added or expanded, to have `shape`.
tensor sum_to(const tensor& grad, const shape_t& shape);

/// Throws naming `op` when an in-place op would write into a tensor autograd tracks.
void check_in_place(const tensor& out, const char* op,
                    std::initializer_list<const tensor*> inputs = {});

} // namespace autograd
} // namespace actorch
