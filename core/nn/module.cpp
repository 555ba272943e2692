// nn.Module bookkeeping: registration, traversal, train/eval, state_dict and loading.
#include "core/nn/module.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "core/autograd/grad_mode.hpp"

namespace actorch::nn {

namespace {
void check_name(const std::string& name, const char* what) {
  ACTORCH_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_", what,
                ": name \"", name, "\" must be non-empty and contain no \".\"");
}
} // namespace

tensor module::forward(const tensor&) {
  ACTORCH_FAIL(name(), ": this module has no single-input forward");
}

tensor& module::register_parameter(const std::string& name, tensor t, bool requires_grad) {
  check_name(name, "parameter");
  for (const auto& [n, _] : parameters_)
    ACTORCH_CHECK(n != name, "register_parameter: \"", name, "\" is already registered");
  if (requires_grad)
    t.requires_grad_();
  parameters_.emplace_back(name, std::move(t));
  return parameters_.back().second;
}

tensor& module::register_buffer(const std::string& name, tensor t) {
  check_name(name, "buffer");
  for (const auto& [n, _] : buffers_)
    ACTORCH_CHECK(n != name, "register_buffer: \"", name, "\" is already registered");
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void module::add_child(const std::string& name, std::shared_ptr<module> m) {
  check_name(name, "module");
  ACTORCH_CHECK(m != nullptr, "register_module: module \"", name, "\" is null");
  for (const auto& [n, _] : children_)
    ACTORCH_CHECK(n != name, "register_module: \"", name, "\" is already registered");
  children_.emplace_back(name, std::move(m));
}

void module::collect(const std::string& prefix, bool params, bool buffers, named_tensors& out,
                     bool recurse) const {
  if (params)
    for (const auto& [n, t] : parameters_)
      out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_)
      out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, child] : children_)
      child->collect(prefix + n + ".", params, buffers, out, true);
}

named_tensors module::named_parameters(bool recurse) const {
  named_tensors out;
  collect("", true, false, out, recurse);
  return out;
}

std::vector<tensor> module::parameters(bool recurse) const {
  std::vector<tensor> out;
  for (auto& [_, t] : named_parameters(recurse))
    out.push_back(t);
  return out;
}

named_tensors module::named_buffers(bool recurse) const {
  named_tensors out;
  collect("", false, true, out, recurse);
  return out;
}

std::vector<tensor> module::buffers(bool recurse) const {
  std::vector<tensor> out;
  for (auto& [_, t] : named_buffers(recurse))
    out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<module>>> module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<module>> module::children() const {
  std::vector<std::shared_ptr<module>> out;
  for (const auto& [_, c] : children_)
    out.push_back(c);
  return out;
}

module& module::train(bool on) {
  training_ = on;
  for (auto& [_, c] : children_)
    c->train(on);
  return *this;
}

named_tensors module::state_dict() const {
  named_tensors out;
  collect("", true, true, out, true);
  for (auto& [_, t] : out)
    t = t.detach();
  return out;
}

incompatible_keys module::load_state_dict(const named_tensors& state, bool strict) {
  const named_tensors own = state_dict();
  std::map<std::string, const tensor*> given;
  for (const auto& [n, t] : state) {
    ACTORCH_CHECK(given.emplace(n, &t).second, "load_state_dict: key \"", n,
                  "\" appears twice in the state dict");
  }
  // Check everything first: nothing is written unless the whole state fits.
  std::vector<std::string> missing;
  std::set<std::string> known;
  for (const auto& [n, t] : own) {
    known.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const tensor& src = *it->second;
    ACTORCH_CHECK(src.defined(), "load_state_dict: \"", n, "\" is undefined");
    ACTORCH_CHECK(src.sizes() == t.sizes(), "load_state_dict: size mismatch for \"", n,
                  "\": copying a param with shape ", shape_str(src.sizes()),
                  ", the shape in the current model is ", shape_str(t.sizes()));
    ACTORCH_CHECK(src.dtype() == t.dtype(), "load_state_dict: dtype mismatch for \"", n,
                  "\": the checkpoint has ", dtype_name(src.dtype()), ", the model ",
                  dtype_name(t.dtype()));
  }
  incompatible_keys out;
  out.missing_keys = missing;
  for (const auto& [n, _] : state)
    if (!known.count(n))
      out.unexpected_keys.push_back(n);
  if (strict) {
    ACTORCH_CHECK(missing.empty(), "load_state_dict: missing key \"", missing.front(), "\"",
                  missing.size() > 1 ? " (and " + std::to_string(missing.size() - 1) + " more)"
                                     : "");
    ACTORCH_CHECK(out.unexpected_keys.empty(), "load_state_dict: unexpected key \"",
                  out.unexpected_keys.front(), "\"");
  }
  no_grad guard;
  for (auto& [n, t] : own) {
    const auto it = given.find(n);
    if (it == given.end())
      continue; // missing, and not strict
    tensor target = t;
    target.copy_(*it->second);
  }
  return out;
}

std::shared_ptr<module> module::clone() const {
  ACTORCH_FAIL(name(), " has no clone(): replicating a module (data_parallel, replicate) copies it "
                       "through clone(), as libtorch's Cloneable; override clone() in it");
}

std::shared_ptr<module> module::copy_state_into(std::shared_ptr<module> fresh) const {
  fresh->load_state_dict(state_dict());
  const named_tensors mine = named_parameters(), theirs = fresh->named_parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    tensor p = theirs[i].second;
    p.requires_grad_(mine[i].second.requires_grad());
  }
  fresh->copy_training_modes_from(*this);
  return fresh;
}

void module::copy_training_modes_from(const module& other) {
  ACTORCH_CHECK(children_.size() == other.children_.size(), name(),
                ": copy_training_modes_from a module of another structure (", children_.size(),
                " children against ", other.children_.size(), ")");
  training_ = other.training_;
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i].second->copy_training_modes_from(*other.children_[i].second);
}

void consume_prefix_in_state_dict_if_present(named_tensors& state, const std::string& prefix) {
  for (auto& [name, t] : state)
    if (name.rfind(prefix, 0) == 0)
      name.erase(0, prefix.size());
}

void consume_ddp_prefix(named_tensors& state, const module& model) {
  const auto prefixed = [](const named_tensors& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](const auto& kv) {
      return kv.first.rfind("module.", 0) == 0;
    });
  };
  if (prefixed(state) && !prefixed(model.state_dict()))
    consume_prefix_in_state_dict_if_present(state, "module.");
}

void module::zero_grad(bool set_to_none) {
  zero_grads(parameters(), set_to_none);
}

namespace {
// Makes x hold c's data, keeping x's identity (PyTorch replaces param.data): layers hold their
// parameters as members too, and optimizers may already hold them. The gradient follows, as
// module.to moves param.grad in PyTorch.
void replace_data(tensor& x, const tensor& c) {
  const tensor grad = x.grad();
  tensor_impl& impl = *x.impl_ptr();
  impl.storage = c.storage();
  impl.sizes = c.sizes();
  impl.strides = c.strides();
  impl.offset = c.storage_offset();
  impl.dtype = c.dtype();
  if (grad.defined())
    x.set_grad(grad.to(c.device()).to(c.dtype()));
}
} // namespace

void module::apply_to_tensors(const std::function<void(tensor&)>& f) {
  for (auto& [_, p] : parameters_)
    f(p);
  for (auto& [_, b] : buffers_)
    f(b);
  for (auto& [_, c] : children_)
    c->apply_to_tensors(f);
}

module& module::to(dtype t) {
  apply_to_tensors([t](tensor& x) {
    if (!x.defined() || x.dtype() == t || !x.is_floating_point())
      return;
    no_grad guard;
    replace_data(x, x.to(t));
  });
  return *this;
}

module& module::to(const device& d) {
  apply_to_tensors([&d](tensor& x) {
    if (!x.defined() || x.device() == d)
      return;
    no_grad guard;
    replace_data(x, x.to(d));
  });
  return *this;
}

} // namespace actorch::nn
