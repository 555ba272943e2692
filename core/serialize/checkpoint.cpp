// save_checkpoint / load_checkpoint (checkpoint.hpp), in safetensors or, for .pt and .pth,
// PyTorch's format with torch's layouts of an optimizer's state dict.
#include "core/serialize/checkpoint.hpp"

#include <optional>

#include "base/parse.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/safetensors.hpp"
#include "core/serialize/torch_format.hpp"

namespace actorch {

namespace {

// Note [Optimizer state dicts in torch's layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// actorch's optimizer_state names its entries
// "state.<i>.<name>" and "param_groups.0.<name>" (kind, lr, the hyper-parameters); torch's
// optimizer.state_dict() is {"state": {i: {name: tensor}}, "param_groups": [{"lr": ...,
// "params": [0, ...], ...}]}. SGD's hyper-parameters are torch's names; Adam's beta1 and beta2
// are torch's "betas" pair. Only what actorch's SGD and Adam implement converts: one parameter
// group, no amsgrad, maximize, foreach, capturable or differentiable (torch's defaults are
// written, and other values refused on load). Adam's step is torch 1.13's float32 scalar.
pickle_value torch_optimizer_value(const optim::optimizer_state& s) {
  const std::string kind = s.metadata.at("kind");
  auto number = [&](const std::string& name) {
    return parse_double(s.metadata.at("param_groups.0." + name), "optimizer state " + name);
  };
  pickle_value::dict state;
  std::map<int64_t, pickle_value::dict> per_param;
  for (const auto& [key, t] : s.tensors) {
    const size_t dot = key.find('.', 6); // "state.<i>.<name>"
    const int64_t index = parse_int(key.substr(6, dot - 6), "optimizer state key " + key, 0);
    const std::string name = key.substr(dot + 1);
    per_param[index].items.emplace_back(name, name == "step" ? t.to(dtype::float32) : t);
  }
  for (auto& [index, entries] : per_param)
    state.items.emplace_back(index, std::move(entries));
  pickle_value::dict group;
  auto put = [&](const std::string& k, pickle_value v) {
    group.items.emplace_back(k, std::move(v));
  };
  put("lr", number("lr"));
  if (kind == "SGD") {
    put("momentum", number("momentum"));
    put("dampening", number("dampening"));
    put("weight_decay", number("weight_decay"));
    put("nesterov", number("nesterov") != 0);
    put("maximize", false);
    put("foreach", pickle_value::none{});
    put("differentiable", false);
  } else {
    put("betas", pickle_value::tuple{{number("beta1"), number("beta2")}});
    put("eps", number("eps"));
    put("weight_decay", number("weight_decay"));
    put("amsgrad", false);
    put("maximize", false);
    put("foreach", pickle_value::none{});
    put("capturable", false);
    put("differentiable", false);
  }
  pickle_value::list params;
  const int64_t n = parse_int(s.metadata.at("param_groups.0.params"), "optimizer state params", 0);
  for (int64_t i = 0; i < n; ++i)
    params.items.emplace_back(i);
  put("params", std::move(params));
  pickle_value::dict out;
  out.items.emplace_back(std::string("state"), std::move(state));
  out.items.emplace_back(std::string("param_groups"), pickle_value::list{{std::move(group)}});
  return out;
}

const pickle_value* find(const pickle_value::dict& d, const std::string& key) {
  for (const auto& [k, v] : d.items)
    if (const auto* s = std::get_if<std::string>(&k.v); s && *s == key)
      return &v;
  return nullptr;
}

optim::optimizer_state optimizer_state_of(const pickle_value& v, const std::string& path) {
  auto fail_unless = [&](bool ok, const std::string& what) {
    ACTORCH_CHECK(ok, "load_checkpoint: ", path, ": the optimizer's state dict ", what);
  };
  const auto* d = std::get_if<pickle_value::dict>(&v.v);
  fail_unless(d != nullptr, "is not a dict");
  const pickle_value* groups_v = find(*d, "param_groups");
  const pickle_value* state_v = find(*d, "state");
  fail_unless(groups_v && state_v, "has no \"state\" or no \"param_groups\"");
  const auto* groups = std::get_if<pickle_value::list>(&groups_v->v);
  fail_unless(groups && groups->items.size() == 1,
              "has other than one param group (actorch's optimizers have one)");
  const auto* group = std::get_if<pickle_value::dict>(&groups->items[0].v);
  fail_unless(group != nullptr, "has a param group that is not a dict");
  auto number = [&](const std::string& key) {
    const pickle_value* x = find(*group, key);
    fail_unless(x != nullptr, "has no \"" + key + "\"");
    if (const auto* f = std::get_if<double>(&x->v))
      return *f;
    if (const auto* i = std::get_if<int64_t>(&x->v))
      return double(*i);
    if (const auto* b = std::get_if<bool>(&x->v))
      return *b ? 1.0 : 0.0;
    fail_unless(false, "has a \"" + key + "\" that is not a number");
    return 0.0;
  };
  for (const char* off : {"amsgrad", "maximize", "capturable", "differentiable", "fused"})
    if (const pickle_value* x = find(*group, off)) {
      const auto* b = std::get_if<bool>(&x->v);
      fail_unless(!b || !*b, std::string("sets ") + off + ", which actorch's optimizers do not do");
    }
  optim::optimizer_state s;
  const bool adam = find(*group, "betas") != nullptr;
  s.metadata["kind"] = adam ? "Adam" : "SGD";
  s.metadata["param_groups.0.lr"] = format_double(number("lr"));
  if (adam) {
    const auto* betas = std::get_if<pickle_value::tuple>(&find(*group, "betas")->v);
    fail_unless(betas && betas->items.size() == 2, "has betas that are not a pair");
    for (size_t i = 0; i < 2; ++i) {
      const auto* b = std::get_if<double>(&betas->items[i].v);
      fail_unless(b != nullptr, "has a beta that is not a number");
      s.metadata["param_groups.0.beta" + std::to_string(i + 1)] = format_double(*b);
    }
    s.metadata["param_groups.0.eps"] = format_double(number("eps"));
  } else {
    for (const char* k : {"momentum", "dampening", "nesterov"})
      s.metadata[std::string("param_groups.0.") + k] = format_double(number(k));
  }
  s.metadata["param_groups.0.weight_decay"] = format_double(number("weight_decay"));
  const pickle_value* params = find(*group, "params");
  const auto* plist = params ? std::get_if<pickle_value::list>(&params->v) : nullptr;
  fail_unless(plist != nullptr, "has no \"params\" list");
  s.metadata["param_groups.0.params"] = std::to_string(plist->items.size());
  const auto* state = std::get_if<pickle_value::dict>(&state_v->v);
  fail_unless(state != nullptr, "has a \"state\" that is not a dict");
  for (const auto& [k, entries] : state->items) {
    const auto* index = std::get_if<int64_t>(&k.v);
    const auto* e = std::get_if<pickle_value::dict>(&entries.v);
    fail_unless(index && e, "has a state entry that is not {index: {name: tensor}}");
    for (const auto& [name_v, t_v] : e->items) {
      const auto* name = std::get_if<std::string>(&name_v.v);
      const auto* t = std::get_if<tensor>(&t_v.v);
      fail_unless(name && t, "has a state value that is not a tensor");
      s.tensors.emplace_back("state." + std::to_string(*index) + "." + *name,
                             *name == "step" ? t->to(dtype::float64) : *t);
    }
  }
  return s;
}

// Note [Scheduler state in torch's layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's StepLR.state_dict() is its __dict__ without the optimizer: step_size, gamma,
// base_lrs and _last_lr (one value per parameter group), last_epoch, _step_count (the
// constructor's step counts: last_epoch + 1), verbose and _get_lr_called_within_step. Its
// load_state_dict updates __dict__ with whatever it is given, so every key is written.
pickle_value torch_step_lr_value(const std::map<std::string, double>& s) {
  const auto one = [](double v) { return pickle_value{pickle_value::list{{pickle_value{v}}}}; };
  const auto epoch = int64_t(s.at("last_epoch"));
  pickle_value::dict d;
  d.items.emplace_back(std::string("step_size"), int64_t(s.at("step_size")));
  d.items.emplace_back(std::string("gamma"), s.at("gamma"));
  d.items.emplace_back(std::string("base_lrs"), one(s.at("base_lr")));
  d.items.emplace_back(std::string("last_epoch"), epoch);
  d.items.emplace_back(std::string("_step_count"), epoch + 1);
  d.items.emplace_back(std::string("verbose"), false);
  d.items.emplace_back(std::string("_get_lr_called_within_step"), false);
  d.items.emplace_back(std::string("_last_lr"), one(s.at("last_lr")));
  return pickle_value{std::move(d)};
}

/// A .pt checkpoint's "scheduler" entry (torch's StepLR layout) as step_lr::state_dict's.
std::map<std::string, double> step_lr_state_of(const pickle_value& v, const std::string& path) {
  const auto* d = std::get_if<pickle_value::dict>(&v.v);
  ACTORCH_CHECK(d, "load_checkpoint: ", path, ": \"scheduler\" is not a dict (StepLR's state)");
  const auto number = [&](const char* key, bool first_of_list) {
    const pickle_value* x = find(*d, key);
    ACTORCH_CHECK(x, "load_checkpoint: ", path, ": the scheduler's state has no \"", key, "\"");
    if (first_of_list) {
      const auto* l = std::get_if<pickle_value::list>(&x->v);
      ACTORCH_CHECK(l && l->items.size() == 1, "load_checkpoint: ", path, ": the scheduler's \"",
                    key, "\" is not a list of one value (one parameter group)");
      x = &l->items[0];
    }
    if (const auto* i = std::get_if<int64_t>(&x->v))
      return double(*i);
    const auto* f = std::get_if<double>(&x->v);
    ACTORCH_CHECK(f, "load_checkpoint: ", path, ": the scheduler's \"", key, "\" is no number");
    return *f;
  };
  return {{"step_size", number("step_size", false)},
          {"gamma", number("gamma", false)},
          {"base_lr", number("base_lrs", true)},
          {"last_epoch", number("last_epoch", false)},
          {"last_lr", number("_last_lr", true)}};
}

} // namespace

void save_checkpoint(const std::string& path, const nn::module& model, const optim::optimizer& opt,
                     const std::map<std::string, std::string>& metadata,
                     const optim::step_lr* scheduler) {
  save_checkpoint(path, model, opt.state_dict(), metadata, scheduler);
}

void save_checkpoint(const std::string& path, const nn::module& model,
                     const optim::optimizer_state& os,
                     const std::map<std::string, std::string>& metadata,
                     const optim::step_lr* scheduler) {
  std::vector<std::pair<std::string, tensor>> tensors;
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    ACTORCH_CHECK(k.rfind("optim.", 0) != 0 && k.rfind("scheduler.", 0) != 0,
                  "save_checkpoint: ", path, ": metadata key \"", k,
                  "\" is reserved (\"optim.\" and \"scheduler.\" keys hold the optimizer's and "
                  "the scheduler's state)");
    meta[k] = v;
  }
  const auto sched = scheduler ? scheduler->state_dict() : std::map<std::string, double>{};
  if (torch_checkpoint_path(path)) {
    // torch's layout: {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
    // and the metadata as strings}.
    pickle_value::dict d;
    d.items.emplace_back(std::string("model"), state_dict_value(model.state_dict()));
    d.items.emplace_back(std::string("optimizer"), torch_optimizer_value(os));
    if (scheduler)
      d.items.emplace_back(std::string("scheduler"), torch_step_lr_value(sched));
    for (const auto& [k, v] : meta) {
      ACTORCH_CHECK(k != "model" && k != "optimizer" && k != "scheduler", "save_checkpoint: ", path,
                    ": metadata key \"", k, "\" is reserved");
      d.items.emplace_back(k, v);
    }
    torch_save(path, d);
    return;
  }
  for (const auto& [n, t] : model.state_dict())
    tensors.emplace_back("model." + n, t);
  for (const auto& [n, t] : os.tensors)
    tensors.emplace_back("optim." + n, t);
  for (const auto& [k, v] : os.metadata)
    meta["optim." + k] = v;
  for (const auto& [k, v] : sched)
    meta["scheduler." + k] = format_double(v);
  save_safetensors(path, tensors, meta);
}

nn::named_tensors checkpoint_model_state(const std::string& path) {
  if (torch_checkpoint_path(path)) {
    const pickle_value v = torch_load(path);
    const auto* d = std::get_if<pickle_value::dict>(&v.v);
    const pickle_value* model = d ? find(*d, "model") : nullptr;
    // A checkpoint, or a bare state dict (torch.save(model.state_dict(), PATH)).
    const named_tensor_list l = torch_state_dict(model ? *model : v, path);
    return {l.begin(), l.end()};
  }
  nn::named_tensors model_state;
  for (auto& [n, t] : load_safetensors(path).tensors)
    if (n.rfind("model.", 0) == 0)
      model_state.emplace_back(n.substr(6), std::move(t));
  return model_state;
}

namespace {

// The model's state and the optimizer's into them, or neither; returns `meta`.
std::map<std::string, std::string>
load_model_and_optimizer(nn::module& model, optim::optimizer& opt, nn::named_tensors model_state,
                         const optim::optimizer_state& opt_state,
                         std::map<std::string, std::string> meta) {
  // A model state saved from a DistributedDataParallel ("model.module.0.weight") loads into the
  // bare model too: the prefix is consumed, as PyTorch users strip it.
  nn::consume_ddp_prefix(model_state, model);
  // Each load checks everything before it writes; if the optimizer's fails after the model's
  // succeeded, the model gets its old state back, so a bad file changes nothing.
  nn::named_tensors backup;
  for (const auto& [n, t] : model.state_dict())
    backup.emplace_back(n, t.clone());
  model.load_state_dict(model_state);
  try {
    opt.load_state_dict(opt_state);
  } catch (...) {
    model.load_state_dict(backup);
    throw;
  }
  return meta;
}

} // namespace

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::module& model,
                                                   optim::optimizer& opt,
                                                   optim::step_lr* scheduler) {
  nn::named_tensors model_state;
  optim::optimizer_state opt_state;
  std::map<std::string, std::string> meta;
  std::optional<std::map<std::string, double>> sched;
  // The scheduler's state is checked with the rest, before anything is loaded, and set last (its
  // last_lr is the optimizer's lr).
  const auto finish = [&](std::map<std::string, std::string> m) {
    if (scheduler) {
      ACTORCH_CHECK(sched.has_value(), "load_checkpoint: ", path,
                    " holds no scheduler state (saved without a scheduler)");
      try {
        optim::step_lr::check_state(*sched);
      } catch (const error& e) {
        ACTORCH_FAIL("load_checkpoint: ", path, ": ", e.what());
      }
    }
    m = load_model_and_optimizer(model, opt, std::move(model_state), opt_state, std::move(m));
    if (scheduler)
      scheduler->load_state_dict(*sched);
    return m;
  };
  if (torch_checkpoint_path(path)) {
    const pickle_value v = torch_load(path);
    const auto* d = std::get_if<pickle_value::dict>(&v.v);
    ACTORCH_CHECK(d != nullptr, "load_checkpoint: ", path, ": not a checkpoint (a dict)");
    const pickle_value* m = find(*d, "model");
    const pickle_value* o = find(*d, "optimizer");
    ACTORCH_CHECK(m && o, "load_checkpoint: ", path,
                  ": expected \"model\" and \"optimizer\" keys (torch's checkpoint layout)");
    for (auto& [n, t] : torch_state_dict(*m, path))
      model_state.emplace_back(n, t);
    opt_state = optimizer_state_of(*o, path);
    for (const auto& [k, val] : d->items) {
      const auto* key = std::get_if<std::string>(&k.v);
      if (!key || *key == "model" || *key == "optimizer")
        continue;
      if (*key == "scheduler") {
        sched = step_lr_state_of(val, path);
        continue;
      }
      if (const auto* s = std::get_if<std::string>(&val.v))
        meta[*key] = *s;
      else if (const auto* i = std::get_if<int64_t>(&val.v))
        meta[*key] = std::to_string(*i);
      else if (const auto* f = std::get_if<double>(&val.v))
        meta[*key] = format_double(*f);
    }
    return finish(std::move(meta));
  }
  const safetensors_file f = load_safetensors(path);
  for (const auto& [n, t] : f.tensors) {
    if (n.rfind("model.", 0) == 0)
      model_state.emplace_back(n.substr(6), t);
    else if (n.rfind("optim.", 0) == 0)
      opt_state.tensors.emplace_back(n.substr(6), t);
    else
      ACTORCH_FAIL("load_checkpoint: ", path, ": unexpected tensor \"", n,
                   "\" (expected \"model.*\" and \"optim.*\" keys)");
  }
  for (const auto& [k, v] : f.metadata) {
    if (k.rfind("optim.", 0) == 0) {
      opt_state.metadata[k.substr(6)] = v;
    } else if (k.rfind("scheduler.", 0) == 0) {
      if (!sched)
        sched.emplace();
      (*sched)[k.substr(10)] = parse_double(v, path + ": metadata \"" + k + "\"");
    } else {
      meta[k] = v;
    }
  }
  return finish(std::move(meta));
}

} // namespace actorch
