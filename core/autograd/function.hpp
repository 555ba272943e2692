// Custom autograd functions, as torch.autograd.Function (libtorch's torch::autograd::Function):
// a forward and a backward written by the user, tensors saved for backward, needs_input_grad.
//
//   struct my_exp : autograd::function<my_exp> {
//     static tensor forward(autograd::function_context& ctx, const tensor& x) {
//       tensor y = x.exp();
//       ctx.save_for_backward({y});
//       return y;
//     }
//     static std::vector<tensor> backward(autograd::function_context& ctx,
//                                         const std::vector<tensor>& grad_outputs) {
//       return {grad_outputs[0] * ctx.get_saved_variables()[0]};
//     }
//   };
//   tensor y = my_exp::apply(x); // y.grad_fn() is "my_expBackward"
//
// forward runs without recording (as torch's does) and takes any arguments after the context;
// the tensor ones are the node's inputs. backward returns one gradient per forward argument
// (an undefined tensor for a non-tensor argument or one that needs none), as libtorch's does.
// One output tensor per function.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/autograd/grad_mode.hpp"
#include "core/tensor.hpp"

namespace actorch::autograd {

/// What a custom function's forward hands to its backward (torch's ctx).
class function_context {
public:
  /// Tensors backward needs. Modifying one in place before backward runs is an error there,
  /// as in torch.
  void save_for_backward(std::vector<tensor> tensors);
  /// In backward: the saved tensors, in the order saved.
  const std::vector<tensor>& get_saved_variables() const;
  /// Whether forward argument `i` (counted from 0 after the context) is a tensor that needs a
  /// gradient. Valid in forward and in backward.
  bool needs_input_grad(size_t i) const;
  /// Anything else backward needs (dims, scales, shapes), by name.
  std::map<std::string, std::any> saved_data;

private:
  template <class T> friend class function;
  friend struct function_recorder;
  std::vector<tensor> to_save_;
  std::vector<tensor> saved_;
  std::vector<bool> needs_input_grad_;
  bool in_backward_ = false;
};

/// The non-template part of function<T>::apply (function.cpp).
struct function_recorder {
  using backward_fn =
      std::function<std::vector<tensor>(function_context&, const std::vector<tensor>&)>;
  /// Records `out` as made by the custom function `name` from the tensor arguments `inputs`
  /// (at positions `positions` among `num_args`), whose backward is `backward`.
  static tensor record(tensor out, const std::string& name, std::vector<const tensor*> inputs,
                       std::vector<size_t> positions, size_t num_args,
                       std::shared_ptr<function_context> ctx, backward_fn backward);
  /// "my_exp" for actorch::my_exp: the class name without namespaces (demangled).
  static std::string class_name(const std::type_info& t);
};

template <class T> class function {
public:
  template <class... Args> static tensor apply(Args&&... args) {
    auto ctx = std::make_shared<function_context>();
    std::vector<const tensor*> inputs;
    std::vector<size_t> positions;
    size_t i = 0;
    (collect(args, i++, inputs, positions, ctx->needs_input_grad_), ...);
    tensor out;
    {
      no_grad guard;
      out = T::forward(*ctx, std::forward<Args>(args)...);
    }
    return function_recorder::record(std::move(out), node_name(), std::move(inputs),
                                     std::move(positions), sizeof...(Args), std::move(ctx),
                                     [](function_context& c, const std::vector<tensor>& grads) {
                                       return T::backward(c, grads);
                                     });
  }

private:
  /// T::name() + "Backward" when T names itself (static const char* name()), else T's class
  /// name + "Backward", as torch names a Python Function's node.
  static std::string node_name() {
    if constexpr (requires { T::name(); })
      return std::string(T::name()) + "Backward";
    else
      return function_recorder::class_name(typeid(T)) + "Backward";
  }

  template <class A>
  static void collect(const A& a, size_t pos, std::vector<const tensor*>& inputs,
                      std::vector<size_t>& positions, std::vector<bool>& needs) {
    if constexpr (std::is_same_v<std::decay_t<A>, tensor>) {
      inputs.push_back(&a);
      positions.push_back(pos);
      needs.push_back(grad_enabled() && a.defined() && a.requires_grad());
    } else {
      needs.push_back(false);
    }
  }
};

} // namespace actorch::autograd
