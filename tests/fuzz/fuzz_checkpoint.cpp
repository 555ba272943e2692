// libFuzzer target: load_checkpoint on an arbitrary file, into a Linear layer and its Adam, then
// its SGD with momentum. A file is either loaded, the model then holding the file's tensors, or
// refused with actorch::error, leaving the model and the optimizer exactly as they were; any
// other exception, a crash or a sanitizer report is a bug. With ACTORCH_FUZZ_SEED_DIR set, the
// target writes a checkpoint of each pair there instead, as seeds, and exits.
// See tests/fuzz/README.md.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/error.hpp"
#include "core/nn/layers.hpp"
#include "core/ops/factory.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/checkpoint.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace actorch;

struct trained {
  std::unique_ptr<nn::linear> model;
  std::unique_ptr<optim::optimizer> opt;
};

/// A Linear(3, 2) after one step of its optimizer, so that it has per-parameter state.
trained make(bool use_adam) {
  generator gen(7);
  trained t{std::make_unique<nn::linear>(3, 2, true, &gen), nullptr};
  if (use_adam)
    t.opt = std::make_unique<optim::adam>(t.model->parameters(), optim::adam_options{});
  else
    t.opt = std::make_unique<optim::sgd>(t.model->parameters(),
                                         optim::sgd_options{.lr = 0.1, .momentum = 0.9});
  for (tensor p : t.model->parameters())
    p.set_grad(full(p.sizes(), 0.5));
  t.opt->step();
  return t;
}

/// Everything a load may change, copied.
struct snapshot {
  nn::named_tensors model;
  optim::optimizer_state opt;
  double lr;
};

snapshot take(const trained& t) {
  snapshot s{{}, t.opt->state_dict(), t.opt->lr()};
  for (const auto& [n, v] : t.model->state_dict())
    s.model.emplace_back(n, v.clone());
  for (auto& [n, v] : s.opt.tensors)
    v = v.clone();
  return s;
}

void check_unchanged(const snapshot& before, const trained& t) {
  const snapshot now = take(t);
  fuzz::require(now.lr == before.lr && now.opt.metadata == before.opt.metadata,
                "a refused load changed the optimizer's hyper-parameters");
  fuzz::require(now.model.size() == before.model.size() &&
                    now.opt.tensors.size() == before.opt.tensors.size(),
                "a refused load changed what the state holds");
  for (size_t i = 0; i < now.model.size(); ++i)
    fuzz::check_same(before.model[i].second, now.model[i].second,
                     "a refused load changed a model tensor");
  for (size_t i = 0; i < now.opt.tensors.size(); ++i)
    fuzz::check_same(before.opt.tensors[i].second, now.opt.tensors[i].second,
                     "a refused load changed an optimizer tensor");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("ACTORCH_FUZZ_SEED_DIR")) {
    for (const bool use_adam : {true, false}) {
      const trained t = make(use_adam);
      save_checkpoint(std::string(dir) + (use_adam ? "/adam.safetensors" : "/sgd.safetensors"),
                      *t.model, *t.opt, {{"epoch", "3"}});
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::as_file(data, size);
  for (const bool use_adam : {true, false}) {
    trained t = make(use_adam);
    const snapshot before = take(t);
    try {
      load_checkpoint(path, *t.model, *t.opt);
    } catch (const error&) {
      check_unchanged(before, t);
      continue;
    }
    // Loaded: the model holds the file's "model.*" tensors.
    const safetensors_file f = load_safetensors(path);
    for (const auto& [name, value] : t.model->state_dict())
      for (const auto& [file_name, file_value] : f.tensors)
        if (file_name == "model." + name)
          fuzz::check_same(value, file_value, "load_checkpoint wrote other values than the file's");
  }
  return 0;
}
