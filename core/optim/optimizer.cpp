// The optimizer base: gradient clearing and the state_dict round trip.
#include "core/optim/optimizer.hpp"

#include <cstdlib>

#include "base/parse.hpp"
#include "core/autograd/grad_mode.hpp"

namespace actorch::optim {

namespace {

double from_text(const std::string& key, const std::string& text) {
  return parse_double(text, "load_state_dict: metadata \"" + key + "\"");
}
} // namespace

optimizer::optimizer(std::vector<tensor> params, double lr, const char* kind)
    : params_(std::move(params)), lr_(lr), kind_(kind) {
  ACTORCH_CHECK(!params_.empty(), kind, ": optimizer got an empty parameter list");
  ACTORCH_CHECK(lr >= 0, kind, ": invalid learning rate: ", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    ACTORCH_CHECK(params_[i].defined() && params_[i].is_leaf() && params_[i].requires_grad(), kind,
                  ": parameter ", i, " must be a leaf tensor that requires grad");
}

void optimizer::zero_grad(bool set_to_none) {
  zero_grads(params_, set_to_none);
}

optimizer_state optimizer::state_dict() const {
  optimizer_state s;
  s.metadata["kind"] = kind_;
  s.metadata["param_groups.0.lr"] = format_double(lr_);
  for (const auto& [name, value] : hyper_parameters())
    s.metadata["param_groups.0." + name] = format_double(value);
  s.metadata["param_groups.0.params"] = std::to_string(params_.size());
  for (const auto& [index, entries] : state_)
    for (const auto& [name, t] : entries)
      s.tensors.emplace_back("state." + std::to_string(index) + "." + name, t.detach());
  return s;
}

void optimizer::load_state_dict(const optimizer_state& s) {
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = s.metadata.find(key);
    ACTORCH_CHECK(it != s.metadata.end(), "load_state_dict: missing metadata \"", key, "\"");
    return it->second;
  };
  ACTORCH_CHECK(meta("kind") == kind_, "load_state_dict: the state is of a ", meta("kind"),
                " optimizer, this one is ", kind_);
  ACTORCH_CHECK(meta("param_groups.0.params") == std::to_string(params_.size()),
                "load_state_dict: the state covers ", meta("param_groups.0.params"),
                " parameters, this optimizer has ", params_.size());
  const double lr = from_text("lr", meta("param_groups.0.lr"));
  std::map<std::string, double> hyper;
  for (const auto& [name, _] : hyper_parameters())
    hyper[name] = from_text(name, meta("param_groups.0." + name));
  std::map<size_t, std::map<std::string, tensor>> restored;
  for (const auto& [key, t] : s.tensors) {
    // "state.<index>.<name>"
    const size_t dot = key.find('.', 6);
    ACTORCH_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos,
                  "load_state_dict: unexpected key \"", key, "\"");
    const std::string idx = key.substr(6, dot - 6);
    char* end = nullptr;
    const unsigned long index = std::strtoul(idx.c_str(), &end, 10);
    ACTORCH_CHECK(!idx.empty() && *end == '\0' && index < params_.size(), "load_state_dict: key \"",
                  key, "\" names no parameter of this optimizer");
    const std::string name = key.substr(dot + 1);
    if (name != "step")
      ACTORCH_CHECK(t.sizes() == params_[index].sizes(), "load_state_dict: \"", key,
                    "\" has shape ", shape_str(t.sizes()), " but parameter ", index, " has ",
                    shape_str(params_[index].sizes()));
    // On the parameter's device (a checkpoint is read to the host), except the step count.
    restored[index][name] =
        name == "step" ? t.clone() : t.to(params_[index].device(), false, /*copy=*/true);
  }
  lr_ = lr;
  for (const auto& [name, v] : hyper)
    set_hyper_parameter(name, v);
  state_ = std::move(restored);
}

} // namespace actorch::optim
