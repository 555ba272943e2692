// `actorch step`: the parity command. Loads an MLP's weights (PyTorch's Sequential names:
// "0.weight", "0.bias", "2.weight", ... with a ReLU between Linear layers) from safetensors or
// torch.save's .pt, inputs and targets from .npy, runs K full-batch training steps, and writes
// the updated weights, the last step's gradients ("<param>.grad") and the per-step losses
// ("losses") to a safetensors or .pt file. A user runs the same steps in PyTorch and compares.
#include <algorithm>
#include <iostream>
#include <map>

#include "base/parse.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/safetensors.hpp"
#include "core/serialize/torch_format.hpp"
#include "tools/actorch/commands.hpp"

namespace actorch::cli {

namespace {

struct step_options {
  std::string weights, inputs, targets, out;
  int64_t steps = 1;
  std::string loss = "cross_entropy";
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, weight_decay = 0, dampening = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// The MLP described by the weights' names: Linear layers at even Sequential indices.
std::shared_ptr<nn::sequential> mlp_from(const named_tensor_list& tensors,
                                         const std::string& path) {
  std::map<int64_t, std::pair<tensor, tensor>> layers; // index -> (weight, bias)
  for (const auto& [name, t] : tensors) {
    const size_t dot = name.find('.');
    const std::string idx = name.substr(0, dot),
                      what = dot == std::string::npos ? "" : name.substr(dot + 1);
    ACTORCH_CHECK(dot != std::string::npos && !idx.empty() &&
                      std::all_of(idx.begin(), idx.end(), ::isdigit) &&
                      (what == "weight" || what == "bias"),
                  "step: ", path, ": unexpected tensor \"", name,
                  "\" (expected a Sequential of Linear and ReLU: \"0.weight\", \"0.bias\", ...)");
    auto& layer =
        layers[parse_int(idx, "step: " + path + ": the layer index of \"" + name + "\"", 0)];
    (what == "weight" ? layer.first : layer.second) = t;
  }
  ACTORCH_CHECK(!layers.empty(), "step: ", path, " holds no weights");
  auto model = std::make_shared<nn::sequential>();
  int64_t expected = 0, prev_out = -1;
  for (auto& [index, wb] : layers) {
    auto& [w, b] = wb;
    const std::string key = std::to_string(index);
    ACTORCH_CHECK(index == expected, "step: ", path, ": layer \"", key, "\" found where \"",
                  expected, "\" was expected (Linear layers at 0, 2, 4, ... with a ReLU between)");
    ACTORCH_CHECK(w.defined(), "step: ", path, ": missing \"", key, ".weight\"");
    ACTORCH_CHECK(w.dim() == 2 && w.is_floating_point(), "step: ", path, ": \"", key,
                  ".weight\" must be a 2-D floating point tensor but has shape ",
                  shape_str(w.sizes()), " and dtype ", dtype_name(w.dtype()));
    ACTORCH_CHECK(prev_out < 0 || w.size(1) == prev_out, "step: ", path, ": \"", key,
                  ".weight\" takes ", w.size(1), " inputs but the previous layer gives ", prev_out);
    ACTORCH_CHECK(!b.defined() || (b.sizes() == shape_t{w.size(0)} && b.dtype() == w.dtype()),
                  "step: ", path, ": \"", key, ".bias\" must have shape [", w.size(0),
                  "] and dtype ", dtype_name(w.dtype()));
    if (index > 0)
      model->push_back(std::make_shared<nn::relu>());
    auto lin = std::make_shared<nn::linear>(w.size(1), w.size(0), b.defined());
    lin->to(w.dtype());
    model->push_back(lin);
    prev_out = w.size(0);
    expected = index + 2;
  }
  nn::named_tensors state;
  for (const auto& [name, t] : tensors)
    state.emplace_back(name, t);
  model->load_state_dict(state);
  return model;
}

void run_step(const step_options& o) {
  // .pt / .pth (torch.save's format) or .safetensors, by the extension.
  auto model = mlp_from(load_state_dict_file(o.weights), o.weights);
  const dtype dt = model->parameters().front().dtype();
  const tensor x = load_npy(o.inputs).to(dt);
  const tensor y = load_npy(o.targets);
  ACTORCH_CHECK(x.dim() == 2, "step: inputs ", o.inputs,
                " must be 2-D (N, features) but have shape ", shape_str(x.sizes()));

  std::function<tensor(const tensor&)> loss_fn;
  if (o.loss == "cross_entropy") {
    ACTORCH_CHECK(is_integral(y.dtype()), "step: cross_entropy needs integer class targets but ",
                  o.targets, " holds ", dtype_name(y.dtype()));
    const tensor t = y.to(dtype::int64);
    loss_fn = [t](const tensor& out) { return nn::functional::cross_entropy(out, t); };
  } else if (o.loss == "mse") {
    const tensor t = y.to(dt);
    loss_fn = [t](const tensor& out) { return nn::functional::mse_loss(out, t); };
  } else {
    ACTORCH_FAIL("step: --loss must be cross_entropy or mse but got \"", o.loss, "\"");
  }

  std::unique_ptr<optim::optimizer> opt;
  if (o.optimizer == "sgd")
    opt = std::make_unique<optim::sgd>(model->parameters(),
                                       optim::sgd_options{.lr = o.lr,
                                                          .momentum = o.momentum,
                                                          .dampening = o.dampening,
                                                          .weight_decay = o.weight_decay,
                                                          .nesterov = o.nesterov});
  else if (o.optimizer == "adam")
    opt = std::make_unique<optim::adam>(model->parameters(),
                                        optim::adam_options{.lr = o.lr,
                                                            .beta1 = o.beta1,
                                                            .beta2 = o.beta2,
                                                            .eps = o.eps,
                                                            .weight_decay = o.weight_decay});
  else
    ACTORCH_FAIL("step: --optimizer must be sgd or adam but got \"", o.optimizer, "\"");

  tensor losses = empty({o.steps}, {.dtype = dt});
  for (int64_t k = 0; k < o.steps; ++k) {
    opt->zero_grad();
    const tensor loss = loss_fn((*model)(x));
    loss.backward();
    opt->step();
    losses[k].fill_(loss.item<double>());
  }

  std::vector<std::pair<std::string, tensor>> out;
  for (const auto& [name, p] : model->named_parameters()) {
    out.emplace_back(name, p.detach());
    out.emplace_back(name + ".grad", p.grad());
  }
  out.emplace_back("losses", losses);
  if (o.out.ends_with(".safetensors"))
    save_safetensors(
        o.out, out,
        {{"steps", std::to_string(o.steps)}, {"loss", o.loss}, {"optimizer", o.optimizer}});
  else
    save_state_dict_file(o.out, out); // .pt / .pth: the tensors (the metadata is safetensors')
  std::cout << "step: " << o.steps << " steps, loss " << losses[0].item<double>() << " -> "
            << losses[o.steps - 1].item<double>() << ", wrote " << o.out << '\n';
}

} // namespace

void add_step(CLI::App& app) {
  auto o = std::make_shared<step_options>();
  auto* cmd = app.add_subcommand(
      "step", "train an MLP for K steps from safetensors or .pt weights and .npy data (parity "
              "checks)");
  cmd->add_option("--weights", o->weights,
                  ".safetensors, .pt or .pth file with 0.weight, 0.bias, 2.weight, ...")
      ->required();
  cmd->add_option("--inputs", o->inputs, ".npy inputs (N, features)")->required();
  cmd->add_option("--targets", o->targets, ".npy targets: class indices (N) or values (N, out)")
      ->required();
  cmd->add_option("--out", o->out, ".safetensors, .pt or .pth file to write")->required();
  cmd->add_option("--steps", o->steps, "training steps K")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--loss", o->loss, "cross_entropy or mse");
  cmd->add_option("--optimizer", o->optimizer, "sgd or adam");
  cmd->add_option("--lr", o->lr, "learning rate");
  cmd->add_option("--momentum", o->momentum, "SGD momentum");
  cmd->add_option("--dampening", o->dampening, "SGD dampening");
  cmd->add_flag("--nesterov", o->nesterov, "SGD Nesterov momentum");
  cmd->add_option("--weight-decay,--weight_decay", o->weight_decay, "L2 penalty");
  cmd->add_option("--beta1", o->beta1, "Adam beta1");
  cmd->add_option("--beta2", o->beta2, "Adam beta2");
  cmd->add_option("--eps", o->eps, "Adam epsilon");
  cmd->callback([o] { run_step(*o); });
}

} // namespace actorch::cli
