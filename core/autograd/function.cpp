// Custom autograd functions (function.hpp): the node a custom function records, its context's
// saved tensors, and the checks of what the user's backward returns.
#include "core/autograd/function.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/autograd/node.hpp"

namespace actorch::autograd {

void function_context::save_for_backward(std::vector<tensor> tensors) {
  ACTORCH_CHECK(!in_backward_, "save_for_backward: call it in forward, not in backward");
  to_save_ = std::move(tensors);
}

const std::vector<tensor>& function_context::get_saved_variables() const {
  ACTORCH_CHECK(in_backward_, "get_saved_variables: the saved tensors are there in backward "
                              "only (forward has the tensors themselves)");
  return saved_;
}

bool function_context::needs_input_grad(size_t i) const {
  ACTORCH_CHECK(i < needs_input_grad_.size(), "needs_input_grad: forward took ",
                needs_input_grad_.size(), " arguments, there is no argument ", i);
  return needs_input_grad_[i];
}

std::string function_recorder::class_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status),
                                           std::free);
  std::string n = status == 0 && d ? d.get() : t.name();
  const size_t colon = n.rfind("::");
  return colon == std::string::npos ? n : n.substr(colon + 2);
}

tensor function_recorder::record(tensor out, const std::string& name,
                                 std::vector<const tensor*> inputs, std::vector<size_t> positions,
                                 size_t num_args, std::shared_ptr<function_context> ctx,
                                 backward_fn backward) {
  ACTORCH_CHECK(out.defined(), name, ": forward returned an undefined tensor");
  std::vector<tensor> saved = std::move(ctx->to_save_);
  ctx->to_save_.clear();
  const auto& needs = ctx->needs_input_grad_;
  if (std::find(needs.begin(), needs.end(), true) == needs.end())
    return out; // nothing to record: the saved tensors go with ctx
  // An output that is one of the inputs (forward returned x itself) gets a handle of its own,
  // so that recording it does not make the input a non-leaf.
  for (const tensor* in : inputs)
    if (in->defined() && in->impl_ptr() == out.impl_ptr()) {
      no_grad guard;
      out = out.view(out.sizes());
    }
  // Saved tensors without their autograd state: saving the output would otherwise make a
  // cycle through its own grad_fn (the storage version still catches in-place changes).
  for (tensor& s : saved)
    if (s.defined())
      s = s.detach();
  const std::string node = name;
  autograd::record(
      out, node.c_str(), inputs, std::move(saved),
      [ctx, backward = std::move(backward), positions = std::move(positions), num_args,
       node](const std::vector<tensor>& grads, const std::vector<tensor>& s) {
        ctx->saved_ = s;
        ctx->in_backward_ = true;
        std::vector<tensor> by_arg = backward(*ctx, grads);
        ctx->saved_.clear();
        ACTORCH_CHECK(by_arg.size() == num_args, node, ": backward returned ", by_arg.size(),
                      " gradients, but forward took ", num_args,
                      " arguments (return one per argument, an undefined tensor where there is "
                      "none)");
        for (size_t a = 0; a < num_args; ++a)
          ACTORCH_CHECK(std::find(positions.begin(), positions.end(), a) != positions.end() ||
                            !by_arg[a].defined(),
                        node, ": backward returned a gradient for argument ", a,
                        ", which is not a tensor");
        std::vector<tensor> out_grads;
        out_grads.reserve(positions.size());
        for (const size_t p : positions)
          out_grads.push_back(std::move(by_arg[p]));
        return out_grads;
      });
  return out;
}

} // namespace actorch::autograd
