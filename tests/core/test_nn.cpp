// nn and optim: module naming and state dicts, layer semantics, losses and optimizer updates
// against values computed by hand, and gradient checks of the functional forms.
#include <cmath>

#include <catch2/catch.hpp>

#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/nn/loss.hpp"
#include "core/optim/sgd.hpp"
#include "tests/core/gradcheck.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;
namespace F = actorch::nn::functional;

namespace {
std::shared_ptr<nn::sequential> mlp(generator* gen) {
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(3, 4, true, gen), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(4, 2, true, gen)});
}
std::vector<std::string> names(const nn::named_tensors& ts) {
  std::vector<std::string> out;
  for (const auto& [n, _] : ts)
    out.push_back(n);
  return out;
}
} // namespace

TEST_CASE("a Sequential names its parameters as PyTorch does", "[core][nn]") {
  generator gen(0);
  auto model = mlp(&gen);
  CHECK(names(model->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(names(model->state_dict()) == names(model->named_parameters()));
  CHECK(model->parameters().size() == 4);
  CHECK(model->children().size() == 3);
  CHECK(model->named_parameters(false).empty());

  auto bn = std::make_shared<nn::batch_norm1d>(4);
  nn::sequential with_bn{std::make_shared<nn::linear>(3, 4, true, &gen), bn};
  CHECK(names(with_bn.state_dict()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var", "1.num_batches_tracked"});
  CHECK(names(with_bn.named_buffers()) ==
        std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
}

TEST_CASE("Linear initialises within PyTorch's bounds and computes x W^T + b", "[core][nn]") {
  generator gen(1);
  nn::linear l(16, 8, true, &gen);
  CHECK(l.weight.sizes() == shape_t{8, 16});
  CHECK(l.bias.sizes() == shape_t{8});
  for (double v : values_of(l.weight))
    REQUIRE(std::abs(v) <= 0.25); // 1 / sqrt(16)
  CHECK(l.weight.requires_grad());
  {
    no_grad guard;
    l.weight.copy_(zeros({8, 16}));
    l.weight.select(0, 1).fill_(1);
    l.bias.fill_(0.5);
  }
  tensor y = l(ones({2, 16}));
  CHECK(values_of(y.select(0, 0)) == std::vector<double>{0.5, 16.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  CHECK(l(ones({3, 2, 16})).sizes() == shape_t{3, 2, 8});
  REQUIRE_THROWS_WITH(l(ones({2, 15})), Contains("does not end in in_features = 16"));
}

TEST_CASE("to(dtype) converts parameters in place, keeping their identity", "[core][nn]") {
  generator gen(4);
  nn::linear l(3, 2, true, &gen);
  const tensor held = l.named_parameters()[0].second; // e.g. what an optimizer holds
  l.to(dtype::float64);
  CHECK(l.weight.dtype() == dtype::float64);
  CHECK(held.dtype() == dtype::float64);
  CHECK(held.is_same(l.weight));
  l(ones({1, 3}, {.dtype = dtype::float64})).sum().backward();
  CHECK(held.grad().defined());
}

TEST_CASE("load_state_dict checks every key before writing any", "[core][nn]") {
  generator g1(1), g2(2);
  auto a = mlp(&g1), b = mlp(&g2);
  b->load_state_dict(a->state_dict());
  CHECK(equal(a->parameters()[2], b->parameters()[2]));

  auto c = mlp(&g2);
  const tensor before = c->parameters()[0].detach().clone();
  auto state = a->state_dict();
  state.pop_back(); // drop "2.bias"
  REQUIRE_THROWS_WITH(c->load_state_dict(state), Contains("missing key \"2.bias\""));
  CHECK(equal(c->parameters()[0], before)); // nothing half-loaded

  state = a->state_dict();
  state.emplace_back("3.weight", zeros({1}));
  REQUIRE_THROWS_WITH(c->load_state_dict(state), Contains("unexpected key \"3.weight\""));
  const nn::incompatible_keys extra = c->load_state_dict(state, false);
  CHECK(extra.unexpected_keys == std::vector<std::string>{"3.weight"});
  CHECK(extra.missing_keys.empty());
  // strict=false also skips what is missing, and says so, as torch's _IncompatibleKeys.
  auto d = mlp(&g2);
  const tensor d_bias = d->parameters()[3].detach().clone();
  state = a->state_dict();
  state.pop_back(); // "2.bias" missing
  const nn::incompatible_keys lacking = d->load_state_dict(state, false);
  CHECK(lacking.missing_keys == std::vector<std::string>{"2.bias"});
  CHECK(equal(d->parameters()[0], a->parameters()[0])); // the rest loaded
  CHECK(equal(d->parameters()[3], d_bias));             // the missing one untouched

  state = a->state_dict();
  state[1].second = zeros({5});
  REQUIRE_THROWS_WITH(c->load_state_dict(state),
                      Contains("size mismatch for \"0.bias\": copying a param with shape [5]"));
  state = a->state_dict();
  state[1].second = zeros({4}, {.dtype = dtype::float64});
  REQUIRE_THROWS_WITH(c->load_state_dict(state), Contains("dtype mismatch for \"0.bias\""));
}

TEST_CASE("train and eval switch Dropout and propagate to children", "[core][nn]") {
  generator gen(5);
  auto drop = std::make_shared<nn::dropout>(0.25, &gen);
  nn::sequential model{drop};
  const tensor x = ones({10000});
  const auto y = values_of(model(x));
  int zeros_seen = 0;
  for (double v : y) {
    REQUIRE((v == 0 || v == Approx(1 / 0.75)));
    zeros_seen += v == 0;
  }
  CHECK(zeros_seen == Approx(2500).margin(150));
  model.eval();
  CHECK_FALSE(drop->is_training());
  CHECK(equal(model(x), x));
  REQUIRE_THROWS_WITH(nn::dropout(1.5), Contains("probability has to be between 0 and 1"));
}

TEST_CASE("BatchNorm1d normalises batches and tracks running statistics", "[core][nn]") {
  nn::batch_norm1d bn(2);
  // Channel 0: 1, 3 (mean 2, biased var 1, unbiased 2); channel 1: 0, 4 (mean 2, var 4 / 8).
  const tensor x = tensor_of({{1.0, 0.0}, {3.0, 4.0}});
  const auto y = values_of(bn(x));
  CHECK(close(y, {-1 / std::sqrt(1 + 1e-5), -2 / std::sqrt(4 + 1e-5), 1 / std::sqrt(1 + 1e-5),
                  2 / std::sqrt(4 + 1e-5)}));
  CHECK(close(values_of(bn.running_mean), {0.2, 0.2}));
  CHECK(close(values_of(bn.running_var), {0.9 + 0.2, 0.9 + 0.8}));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  bn.eval();
  const auto z = values_of(bn(tensor_of({{0.2, 0.2}})));
  CHECK(close(z, {0, 0}));

  nn::batch_norm1d cumulative(1, 1e-5, std::nullopt);
  cumulative(tensor_of({{1.0}, {3.0}}));
  cumulative(tensor_of({{5.0}, {7.0}}));
  CHECK(close(values_of(cumulative.running_mean), {4.0})); // average of the batch means 2 and 6
  REQUIRE_THROWS_WITH(bn(ones({2, 3})), Contains("expected input with 2 channels in dim 1"));
  bn.train();
  REQUIRE_THROWS_WITH(bn(ones({1, 2})), Contains("expected more than 1 value per channel"));
  gradcheck([](const auto& v) { return F::batch_norm(v[0], {}, {}, v[1], v[2], true, 0.1, 1e-5); },
            {tensor_of({{1.0, 0.5, -1.0}, {0.2, 2.0, 0.0}, {-0.7, 1.1, 0.4}}),
             tensor_of({1.5, 0.5, 2.0}), tensor_of({0.1, 0.2, 0.3})});
}

TEST_CASE("BatchNorm2d and BatchNorm3d normalise each channel over the batch and the pixels",
          "[core][nn]") {
  generator g(7);
  // BatchNorm2d over (N, C, H, W) is BatchNorm1d over the N*H*W pixels as rows of C channels.
  const tensor x = randn({3, 2, 4, 5}, {.dtype = dtype::float64}, &g).mul(2).add(1);
  const tensor rows = x.permute({0, 2, 3, 1}).reshape({-1, 2});
  nn::batch_norm2d bn2(2);
  nn::batch_norm1d ref(2);
  bn2.to(dtype::float64);
  ref.to(dtype::float64);
  for (int step = 0; step < 2; ++step) {
    const tensor y = bn2(x);
    const tensor y_ref = ref(rows).reshape({3, 4, 5, 2}).permute({0, 3, 1, 2});
    CHECK(close(values_of(y), values_of(y_ref), 1e-12));
  }
  CHECK(close(values_of(bn2.running_mean), values_of(ref.running_mean), 1e-12));
  CHECK(close(values_of(bn2.running_var), values_of(ref.running_var), 1e-12));
  CHECK(bn2.num_batches_tracked.item<int64_t>() == 2);
  bn2.eval();
  ref.eval();
  CHECK(close(values_of(bn2(x)), values_of(ref(rows).reshape({3, 4, 5, 2}).permute({0, 3, 1, 2})),
              1e-12));

  // By hand: one channel, values 1..4 in a 2x2 image of 1 sample: mean 2.5, biased var 1.25.
  nn::batch_norm2d one(1, 1e-5, 0.5);
  const tensor img = tensor_of({1.0, 2.0, 3.0, 4.0}).view({1, 1, 2, 2});
  const double s = std::sqrt(1.25 + 1e-5);
  CHECK(close(values_of(one(img)), {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}));
  CHECK(close(values_of(one.running_mean), {1.25}));                 // 0.5 * 0 + 0.5 * 2.5
  CHECK(close(values_of(one.running_var), {0.5 + 0.5 * 5.0 / 3.0})); // unbiased var 5/3

  // BatchNorm3d over (N, C, D, H, W) likewise; affine off, no running stats.
  const tensor v = randn({2, 3, 2, 3, 2}, {.dtype = dtype::float64}, &g);
  nn::batch_norm3d bn3(3, 1e-5, 0.1, false, false);
  CHECK(bn3.parameters().empty());
  CHECK(bn3.buffers().empty());
  nn::batch_norm1d ref3(3, 1e-5, 0.1, false, false);
  CHECK(close(values_of(bn3(v)),
              values_of(ref3(v.permute({0, 2, 3, 4, 1}).reshape({-1, 3}))
                            .reshape({2, 2, 3, 2, 3})
                            .permute({0, 4, 1, 2, 3})),
              1e-12));
  bn3.eval(); // no running stats: batch statistics in evaluation too, as in torch
  CHECK(close(values_of(bn3(v).mean({0, 2, 3, 4})), {0, 0, 0}, 1e-12));

  CHECK(bn2.name() == "BatchNorm2d");
  CHECK(bn3.name() == "BatchNorm3d");
  REQUIRE_THROWS_WITH(bn2(ones({2, 2, 3})),
                      Contains("BatchNorm2d: expected 4D input (got 3D input)"));
  REQUIRE_THROWS_WITH(bn3(ones({2, 3, 2, 2})),
                      Contains("BatchNorm3d: expected 5D input (got 4D input)"));
  REQUIRE_THROWS_WITH(nn::batch_norm1d(2)(ones({2, 2, 2, 2})),
                      Contains("BatchNorm1d: expected 2D or 3D input (got 4D input)"));
  REQUIRE_THROWS_WITH(bn2(ones({2, 3, 2, 2})), Contains("expected input with 2 channels in dim 1"));
  REQUIRE_THROWS_WITH(nn::batch_norm2d(0), Contains("BatchNorm2d: num_features must be positive"));
  // Every state_dict key as torch's BatchNorm2d names them.
  std::vector<std::string> keys;
  for (const auto& [k, t] : nn::batch_norm2d(4).state_dict())
    keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                         "num_batches_tracked"});
}

TEST_CASE("batch_norm's gradients over images and volumes", "[core][nn]") {
  generator g(8);
  const auto f = [](const auto& v) {
    return F::batch_norm(v[0], {}, {}, v[1], v[2], true, 0.1, 1e-5);
  };
  gradcheck(f, {randn({2, 3, 2, 2}, {}, &g), rand({3}, {}, &g).add(0.5), randn({3}, {}, &g)});
  gradcheck(f, {randn({2, 2, 2, 2, 3}, {}, &g), rand({2}, {}, &g).add(0.5), randn({2}, {}, &g)});
  // Without affine parameters, and with running statistics in evaluation.
  gradcheck([](const auto& v) { return F::batch_norm(v[0], {}, {}, {}, {}, true, 0.1, 1e-5); },
            {randn({3, 2, 2, 2}, {}, &g)});
  const tensor rm = randn({2}, {}, &g), rv = rand({2}, {}, &g).add(0.5);
  gradcheck([&](const auto& v) { return F::batch_norm(v[0], rm, rv, v[1], v[2], false); },
            {randn({2, 2, 3, 1}, {}, &g), rand({2}, {}, &g), randn({2}, {}, &g)});
}

TEST_CASE("consume_ddp_prefix strips DDP's module. prefix unless the model's keys have it",
          "[core][nn]") {
  nn::sequential model{std::make_shared<nn::linear>(2, 3)};
  nn::named_tensors sd = model.state_dict();
  for (auto& [k, t] : sd)
    k = "module." + k;
  nn::consume_ddp_prefix(sd, model);
  CHECK(sd[0].first == "0.weight");
  CHECK(sd[1].first == "0.bias");
  // Keys without it are left as they are; torch's consume_prefix_in_state_dict_if_present
  // strips every key that has the prefix.
  nn::consume_ddp_prefix(sd, model);
  CHECK(sd[0].first == "0.weight");
  nn::named_tensors mixed = {{"module.a", zeros({1})}, {"b", zeros({1})}};
  nn::consume_ddp_prefix(mixed, model); // not every key prefixed: untouched
  CHECK(mixed[0].first == "module.a");
  nn::consume_prefix_in_state_dict_if_present(mixed, "module.");
  CHECK(mixed[0].first == "a");
  CHECK(mixed[1].first == "b");
}

TEST_CASE("functional linear has correct gradients in every form", "[core][nn]") {
  const tensor x = tensor_of({{0.5, -1.0, 2.0}, {1.5, 0.2, -0.3}});
  const tensor w = tensor_of({{0.1, 0.2, 0.3}, {-0.4, 0.5, -0.6}});
  const tensor b = tensor_of({0.7, -0.8});
  gradcheck([](const auto& v) { return F::linear(v[0], v[1], v[2]); }, {x, w, b});
  gradcheck([](const auto& v) { return F::linear(v[0], v[1]); }, {x, w});
  gradcheck([](const auto& v) { return F::linear(v[0], v[1], v[2]); }, {x.view({1, 2, 3}), w, b});
  // A parameter's gradient has the parameter's own (contiguous) layout.
  tensor wp = w.detach().clone().requires_grad_();
  F::linear(x, wp, b).sum().backward();
  CHECK(wp.grad().is_contiguous());
}

TEST_CASE("losses match hand-computed values and have correct gradients", "[core][nn]") {
  const tensor a = tensor_of({1.0, 2.0, 4.0}), b = tensor_of({0.0, 2.0, 1.0});
  CHECK(nn::mse_loss()(a, b).item<double>() == Approx((1.0 + 0 + 9) / 3));
  CHECK(nn::mse_loss("sum")(a, b).item<double>() == Approx(10));
  CHECK(values_of(nn::mse_loss("none")(a, b)) == std::vector<double>{1, 0, 9});
  REQUIRE_THROWS_WITH(nn::mse_loss("avg"),
                      Contains("expected \"none\", \"mean\" or \"sum\" but got \"avg\""));

  // logits [0, ln 2, ln 3] -> softmax [1/6, 2/6, 3/6]; target 2 -> loss -ln(1/2).
  const tensor logits = tensor_of({{0.0, std::log(2.0), std::log(3.0)}, {0.0, 0.0, 0.0}});
  const tensor target = tensor_of({2, 0});
  CHECK(nn::cross_entropy_loss()(logits, target).item<double>() ==
        Approx((std::log(2.0) + std::log(3.0)) / 2));
  CHECK(close(values_of(nn::cross_entropy_loss({}, -100, "none")(logits, target)),
              {std::log(2.0), std::log(3.0)}));
  const tensor w = tensor_of({1.0, 1.0, 3.0});
  CHECK(nn::cross_entropy_loss(w)(logits, target).item<double>() ==
        Approx((3 * std::log(2.0) + std::log(3.0)) / 4));
  CHECK(nn::cross_entropy_loss({}, 0)(logits, target).item<double>() == Approx(std::log(2.0)));
  CHECK(nn::nll_loss()(tensor_of({-1.0, -2.0}), tensor_of({int64_t(1)}).squeeze()).item<double>() ==
        2);
  REQUIRE_THROWS_WITH(nn::cross_entropy_loss()(logits, tensor_of({3, 0})),
                      Contains("target 3 at position 0 is out of bounds for 3 classes"));
  REQUIRE_THROWS_WITH(nn::cross_entropy_loss()(logits, tensor_of({1.0, 0.0})),
                      Contains("expected target of dtype int64"));
  gradcheck([target](const auto& v) { return F::cross_entropy(v[0], target); }, {logits * 1.3});
  gradcheck([](const auto& v) { return F::mse_loss(v[0], v[1]); }, {a, b});
  gradcheck(
      [target, w](const auto& v) {
        return F::cross_entropy(v[0], target, w, -100, F::reduction::sum);
      },
      {logits});
}

TEST_CASE("SGD follows PyTorch's update rule", "[core][optim]") {
  tensor p = tensor_of({1.0}, {.dtype = dtype::float64}).requires_grad_();
  optim::sgd opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  auto step = [&] {
    opt.zero_grad();
    (p * 0.5).sum().backward(); // gradient 0.5
    opt.step();
  };
  step(); // g = 0.5 + 0.01 * 1 = 0.51; buf = 0.51; p = 1 - 0.051
  CHECK(p.item<double>() == Approx(0.949).epsilon(1e-12));
  step(); // g = 0.5 + 0.00949; buf = 0.9 * 0.51 + 0.50949 = 0.96849; p = 0.949 - 0.096849
  CHECK(p.item<double>() == Approx(0.852151).epsilon(1e-12));

  tensor q = tensor_of({1.0}, {.dtype = dtype::float64}).requires_grad_();
  optim::sgd nesterov({q}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  (q * 0.5).sum().backward();
  nesterov.step(); // buf = 0.5; g = 0.5 + 0.9 * 0.5 = 0.95
  CHECK(q.item<double>() == Approx(0.905).epsilon(1e-12));
  REQUIRE_THROWS_WITH(optim::sgd({q}, {.lr = 0.1, .nesterov = true}),
                      Contains("nesterov momentum requires a momentum and zero dampening"));
  REQUIRE_THROWS_WITH(optim::sgd({q}, {.lr = -1}), Contains("invalid learning rate: -1"));
}

TEST_CASE("Adam follows PyTorch's update rule", "[core][optim]") {
  tensor p = tensor_of({1.0}, {.dtype = dtype::float64}).requires_grad_();
  optim::adam opt({p}, {.lr = 0.1});
  for (int t = 1; t <= 2; ++t) {
    opt.zero_grad();
    (p * 0.5).sum().backward();
    opt.step();
  }
  // Constant gradient g: m_t / (1 - b1^t) = g and v_t / (1 - b2^t) = g^2 exactly, so each step
  // moves lr * g / (|g| + eps).
  const double move = 0.1 * 0.5 / (0.5 + 1e-8);
  CHECK(p.item<double>() == Approx(1 - 2 * move).epsilon(1e-12));
  REQUIRE_THROWS_WITH(optim::adam({p}, {.beta1 = 1.0}),
                      Contains("invalid beta parameter at index 0"));
}

TEST_CASE("StepLR decays the learning rate every step_size epochs", "[core][optim]") {
  tensor p = zeros({1}).requires_grad_();
  optim::sgd opt({p}, {.lr = 1.0});
  optim::step_lr sched(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 5; ++e) {
    lrs.push_back(opt.lr());
    sched.step();
  }
  CHECK(lrs == std::vector<double>{1, 1, 0.5, 0.5, 0.25});
}

TEST_CASE("an optimizer's state round-trips through state_dict", "[core][optim]") {
  auto run = [](optim::adam& opt, tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      (p * p).sum().backward();
      opt.step();
    }
  };
  tensor p = tensor_of({1.0, -2.0}).requires_grad_();
  optim::adam a({p}, {.lr = 0.05});
  run(a, p, 3);
  const auto state = a.state_dict();
  tensor q = p.detach().clone().requires_grad_();
  optim::adam b({q}, {.lr = 0.5});
  b.load_state_dict(state);
  CHECK(b.lr() == 0.05);
  run(a, p, 2);
  run(b, q, 2);
  CHECK(equal(p, q));
  optim::sgd s({q}, {.lr = 0.1});
  REQUIRE_THROWS_WITH(s.load_state_dict(state),
                      Contains("the state is of a Adam optimizer, this one is SGD"));
}

TEST_CASE("SGD's fused step gives the unfused ops' bits, momentum, dampening, nesterov and "
          "weight decay included",
          "[core][optim]") {
  // A transposed (non-contiguous) parameter takes the unfused path; its contiguous twin the
  // fused one. Both see the same gradients.
  for (const optim::sgd_options o :
       {optim::sgd_options{.lr = 0.1},
        optim::sgd_options{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
        optim::sgd_options{.lr = 0.3, .momentum = 0.7, .weight_decay = 0.02, .nesterov = true}}) {
    for (const dtype dt : {dtype::float32, dtype::float64}) {
      generator g(7);
      const tensor init = randn({5, 3}, {.dtype = dt}, &g);
      tensor fused_p = init.clone().requires_grad_();
      tensor plain_p = init.t().contiguous().t().detach().requires_grad_();
      REQUIRE_FALSE(plain_p.is_contiguous());
      optim::sgd fused({fused_p}, o), plain({plain_p}, o);
      for (int step = 0; step < 4; ++step) {
        const tensor w = randn({5, 3}, {.dtype = dt}, &g);
        for (tensor* p : {&fused_p, &plain_p}) {
          p->set_grad({});
          (*p * w).sum().backward();
        }
        fused.step();
        plain.step();
        REQUIRE(values_of(fused_p) == values_of(plain_p));
      }
    }
  }
}
