// SGD, Adam and StepLR. Updates run under no_grad and in place, as PyTorch's do.
#include "core/optim/sgd.hpp"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"

namespace actorch::optim {

sgd::sgd(std::vector<tensor> params, const sgd_options& opts)
    : optimizer(std::move(params), opts.lr, "SGD"), opts_(opts) {
  ACTORCH_CHECK(opts.momentum >= 0, "SGD: invalid momentum value: ", opts.momentum);
  ACTORCH_CHECK(opts.weight_decay >= 0, "SGD: invalid weight_decay value: ", opts.weight_decay);
  ACTORCH_CHECK(!opts.nesterov || (opts.momentum > 0 && opts.dampening == 0),
                "SGD: nesterov momentum requires a momentum and zero dampening");
}

namespace {

// Note [Writing lines another core read]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In a sharded data-parallel step (Note [Sharded step] in actors/trainer/sharded_step.cpp) every
// replica's forward and backward read all the parameters, then each replica's optimizer writes
// its shard of them. So the lines a replica's step writes were last read by the other cores
// and are shared with them: a write to such a line first fetches it, then asks the other cores to
// drop their copies, two trips each between cores, and a streaming loop waits for them one after
// another. On a 2-core AMD EPYC VM (family 26) this made the shard's step of ddp-mlp's half of
// the parameters take 3.4 ms where the world-1 step of all of them takes 1.3 ms, and the world-2
// step 1.3-1.4x the world-1 step. A PREFETCHW a few blocks ahead asks for each line in a state
// this core may write, in one trip and with many in flight: the world-2 step became 1.02-1.08x
// world 1's (docs/performance.md). The prefetches sit outside the element loop, which stays
// vectorized (inside it they made the world-1 step 1-7% slower); on lines this core already
// owns they cost next to nothing. CPUs without PREFETCHW treat it as a NOP.
//
// Asks for the cache lines of p[from, from + count) (within n) in a state this core may write.
template <class T> inline void claim_lines(T* p, int64_t from, int64_t count, int64_t n) {
#if defined(__x86_64__)
  for (int64_t i = from; i < std::min(n, from + count); i += 64 / int64_t(sizeof(T)))
    asm volatile("prefetchw %0" ::"m"(p[i]));
#else
  (void)p, (void)from, (void)count, (void)n;
#endif
}

// One pass over p, g and the momentum buffer, with the arithmetic of the unfused ops below
// (the same roundings, in the same order): 5 memory streams instead of 8 for a momentum step,
// which is what the step costs when two replicas share the memory bus.
template <class T>
void fused_sgd_step(T* p, const T* g, T* buf, bool first, int64_t n, const sgd_options& o,
                    double lr) {
  const T wd = T(o.weight_decay), m = T(o.momentum), keep = T(1 - o.dampening), step = T(-lr);
  // Locals, not o's fields: a store through p or buf could alias a double field, and the
  // compiler would reload and re-test them for every element.
  const bool one = keep == T(1), decay = o.weight_decay != 0, momentum = o.momentum != 0,
             nesterov = o.nesterov;
  constexpr int64_t kLine = 64 / sizeof(T), kBlock = 4 * kLine, kAhead = 4 * kBlock;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    claim_lines(p, begin + kAhead, kBlock, n);
    const int64_t end = std::min(n, begin + kBlock);
    for (int64_t i = begin; i < end; ++i) {
      T d = g[i];
      if (decay)
        d = d + wd * p[i];
      if (momentum) {
        T b = first ? d : buf[i] * m;
        if (!first)
          b = one ? b + d : b + keep * d;
        buf[i] = b;
        d = nesterov ? d + m * b : b;
      }
      p[i] = p[i] + step * d;
    }
  }
}

// `buf` undefined: no momentum buffer yet (the fused step makes a contiguous one).
bool fusable(const tensor& p, const tensor& g, const tensor& buf) {
  const bool floating = p.dtype() == dtype::float32 || p.dtype() == dtype::float64;
  return floating && p.device().is_cpu() && g.dtype() == p.dtype() && p.is_contiguous() &&
         g.is_contiguous() && g.sizes() == p.sizes() &&
         (!buf.defined() || (buf.is_contiguous() && buf.dtype() == p.dtype()));
}

} // namespace

void sgd::step() {
  no_grad guard;
  for (size_t i = 0; i < params_.size(); ++i) {
    tensor& p = params_[i];
    tensor g = p.grad();
    if (!g.defined())
      continue;
    auto& state = state_of(i);
    auto it = state.find("momentum_buffer");
    if (fusable(p, g, it == state.end() ? tensor() : it->second)) {
      tensor buf;
      bool first = false;
      if (opts_.momentum != 0) {
        first = it == state.end();
        if (first)
          it = state.emplace("momentum_buffer", empty_like(p)).first;
        buf = it->second;
      }
      if (p.dtype() == dtype::float32)
        fused_sgd_step<float>(p.data_ptr<float>(), g.data_ptr<float>(),
                              buf.defined() ? buf.data_ptr<float>() : nullptr, first, p.numel(),
                              opts_, lr_);
      else
        fused_sgd_step<double>(p.data_ptr<double>(), g.data_ptr<double>(),
                               buf.defined() ? buf.data_ptr<double>() : nullptr, first, p.numel(),
                               opts_, lr_);
      continue;
    }
    if (opts_.weight_decay != 0)
      g = g.add(p, opts_.weight_decay);
    if (opts_.momentum != 0) {
      if (it == state.end()) {
        it = state.emplace("momentum_buffer", g.clone()).first;
      } else {
        it->second.mul_(opts_.momentum).add_(g, 1 - opts_.dampening);
      }
      g = opts_.nesterov ? g.add(it->second, opts_.momentum) : it->second;
    }
    p.add_(g, -lr_);
  }
}

std::map<std::string, double> sgd::hyper_parameters() const {
  return {{"momentum", opts_.momentum},
          {"dampening", opts_.dampening},
          {"weight_decay", opts_.weight_decay},
          {"nesterov", opts_.nesterov ? 1.0 : 0.0}};
}

void sgd::set_hyper_parameter(const std::string& name, double value) {
  if (name == "momentum")
    opts_.momentum = value;
  else if (name == "dampening")
    opts_.dampening = value;
  else if (name == "weight_decay")
    opts_.weight_decay = value;
  else if (name == "nesterov")
    opts_.nesterov = value != 0;
  opts_.lr = lr_;
}

adam::adam(std::vector<tensor> params, const adam_options& opts)
    : optimizer(std::move(params), opts.lr, "Adam"), opts_(opts) {
  ACTORCH_CHECK(opts.eps >= 0, "Adam: invalid epsilon value: ", opts.eps);
  ACTORCH_CHECK(opts.beta1 >= 0 && opts.beta1 < 1,
                "Adam: invalid beta parameter at index 0: ", opts.beta1);
  ACTORCH_CHECK(opts.beta2 >= 0 && opts.beta2 < 1,
                "Adam: invalid beta parameter at index 1: ", opts.beta2);
  ACTORCH_CHECK(opts.weight_decay >= 0, "Adam: invalid weight_decay value: ", opts.weight_decay);
}

void adam::step() {
  no_grad guard;
  for (size_t i = 0; i < params_.size(); ++i) {
    tensor& p = params_[i];
    tensor g = p.grad();
    if (!g.defined())
      continue;
    auto& state = state_of(i);
    if (!state.count("step")) {
      state["step"] = zeros({}, {.dtype = dtype::float64});
      state["exp_avg"] = zeros_like(p);
      state["exp_avg_sq"] = zeros_like(p);
    }
    tensor step_t = state["step"];
    step_t.add_(1);
    const double t = step_t.item<double>();
    if (opts_.weight_decay != 0)
      g = g.add(p, opts_.weight_decay);
    tensor m = state["exp_avg"], v = state["exp_avg_sq"];
    m.mul_(opts_.beta1).add_(g, 1 - opts_.beta1);
    v.mul_(opts_.beta2).add_(g * g, 1 - opts_.beta2);
    const double bias1 = 1 - std::pow(opts_.beta1, t);
    const double bias2 = 1 - std::pow(opts_.beta2, t);
    const tensor denom = (v.sqrt() / std::sqrt(bias2)).add_(opts_.eps);
    p.add_(m / denom, -lr_ / bias1);
  }
}

std::map<std::string, double> adam::hyper_parameters() const {
  return {{"beta1", opts_.beta1},
          {"beta2", opts_.beta2},
          {"eps", opts_.eps},
          {"weight_decay", opts_.weight_decay}};
}

void adam::set_hyper_parameter(const std::string& name, double value) {
  if (name == "beta1")
    opts_.beta1 = value;
  else if (name == "beta2")
    opts_.beta2 = value;
  else if (name == "eps")
    opts_.eps = value;
  else if (name == "weight_decay")
    opts_.weight_decay = value;
  opts_.lr = lr_;
}

step_lr::step_lr(optimizer& opt, int64_t step_size, double gamma)
    : opt_(opt), step_size_(step_size), gamma_(gamma), base_lr_(opt.lr()) {
  ACTORCH_CHECK(step_size > 0, "StepLR: step_size must be positive but got ", step_size);
}

void step_lr::step() {
  ++epoch_;
  opt_.set_lr(base_lr_ * std::pow(gamma_, double(epoch_ / step_size_)));
}

std::map<std::string, double> step_lr::state_dict() const {
  return {{"step_size", double(step_size_)},
          {"gamma", gamma_},
          {"base_lr", base_lr_},
          {"last_epoch", double(epoch_)},
          {"last_lr", opt_.lr()}};
}

void step_lr::check_state(const std::map<std::string, double>& state) {
  const auto get = [&](const char* key) {
    const auto it = state.find(key);
    ACTORCH_CHECK(it != state.end(), "StepLR.load_state_dict: the state has no \"", key, "\"");
    ACTORCH_CHECK(std::isfinite(it->second), "StepLR.load_state_dict: \"", key, "\" is ",
                  it->second);
    return it->second;
  };
  const double step_size = get("step_size"), last_epoch = get("last_epoch");
  ACTORCH_CHECK(step_size >= 1 && step_size == std::floor(step_size),
                "StepLR.load_state_dict: step_size must be a positive integer but got ", step_size);
  ACTORCH_CHECK(last_epoch >= 0 && last_epoch == std::floor(last_epoch),
                "StepLR.load_state_dict: last_epoch must be an integer >= 0 but got ", last_epoch);
  for (const char* key : {"gamma", "base_lr", "last_lr"})
    get(key);
}

void step_lr::load_state_dict(const std::map<std::string, double>& state) {
  check_state(state);
  step_size_ = int64_t(state.at("step_size"));
  epoch_ = int64_t(state.at("last_epoch"));
  gamma_ = state.at("gamma");
  base_lr_ = state.at("base_lr");
  opt_.set_lr(state.at("last_lr"));
}

} // namespace actorch::optim
