// Autograd: central-difference gradient checks (float64) for every differentiable op, and the
// engine's semantics: accumulation, retain_graph, no_grad, detach, hooks firing mid-backward,
// in-place rules and deep graphs.
#include <functional>
#include <limits>

#include <catch2/catch.hpp>

#include "core/autograd/engine.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "tests/core/gradcheck.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {

tensor r(const shape_t& shape, uint64_t seed, double lo = -1, double hi = 1) {
  generator g(seed);
  return rand(shape, {.dtype = dtype::float64}, &g).mul(hi - lo).add(lo);
}

} // namespace

TEST_CASE("elementwise ops have correct gradients", "[core][autograd]") {
  SECTION("add, sub, mul, div with broadcasting and alpha") {
    gradcheck([](const auto& x) { return add(x[0], x[1], 2.5); }, {r({2, 3}, 1), r({3}, 2)});
    gradcheck([](const auto& x) { return sub(x[0], x[1], 0.5); }, {r({2, 1}, 3), r({1, 4}, 4)});
    gradcheck([](const auto& x) { return x[0] * x[1]; }, {r({2, 3}, 5), r({2, 3}, 6)});
    gradcheck([](const auto& x) { return x[0] / x[1]; }, {r({3}, 7), r({2, 3}, 8, 1, 2)});
    gradcheck([](const auto& x) { return 3.0 - x[0] * 2 + x[0] / 4; }, {r({4}, 9)});
    gradcheck([](const auto& x) { return 2.0 / x[0]; }, {r({4}, 9, 1, 2)});
  }
  SECTION("pow, with a scalar and with a tensor exponent") {
    gradcheck([](const auto& x) { return pow(x[0], 3); }, {r({5}, 10)});
    gradcheck([](const auto& x) { return pow(x[0], x[1]); }, {r({3}, 11, 0.5, 2), r({3}, 12)});
  }
  SECTION("unary math") {
    gradcheck([](const auto& x) { return neg(x[0]); }, {r({3}, 13)});
    gradcheck([](const auto& x) { return abs(x[0]); },
              {r({3}, 14, 0.1, 1) * tensor_of({1.0, -1.0, 1.0})});
    gradcheck([](const auto& x) { return exp(x[0]); }, {r({3}, 15)});
    gradcheck([](const auto& x) { return log(x[0]); }, {r({3}, 16, 0.5, 2)});
    gradcheck([](const auto& x) { return sqrt(x[0]); }, {r({3}, 17, 0.5, 2)});
    gradcheck([](const auto& x) { return relu(x[0]); }, {tensor_of({-0.5, 0.3, 1.2, -2.0})});
    gradcheck([](const auto& x) { return sigmoid(x[0]); }, {r({3}, 18)});
    gradcheck([](const auto& x) { return tanh(x[0]); }, {r({3}, 19)});
    gradcheck([](const auto& x) { return clamp(x[0], -0.5, 0.5); },
              {tensor_of({-0.9, -0.2, 0.3, 0.8})});
  }
  SECTION("maximum, minimum, where and masked_fill") {
    gradcheck([](const auto& x) { return maximum(x[0], x[1]); }, {r({4}, 20), r({4}, 21)});
    gradcheck([](const auto& x) { return minimum(x[0], x[1]); }, {r({2, 4}, 22), r({4}, 23)});
    const tensor cond = tensor_of({true, false, true});
    gradcheck([cond](const auto& x) { return where(cond, x[0], x[1]); },
              {r({3}, 24), r({2, 3}, 25)});
    gradcheck([cond](const auto& x) { return x[0].masked_fill(cond, 7.0); }, {r({2, 3}, 26)});
  }
}

TEST_CASE("reductions and softmax have correct gradients", "[core][autograd]") {
  gradcheck([](const auto& x) { return x[0].sum(); }, {r({2, 3}, 30)});
  gradcheck([](const auto& x) { return x[0].sum({0, 2}, false); }, {r({2, 3, 2}, 31)});
  gradcheck([](const auto& x) { return x[0].mean({1}, true); }, {r({2, 3}, 32)});
  gradcheck([](const auto& x) { return x[0].mean(); }, {r({2, 3}, 33)});
  gradcheck([](const auto& x) { return amax(x[0], {1}); }, {r({3, 4}, 34)});
  gradcheck([](const auto& x) { return x[0].max(1).values; }, {r({3, 4}, 35)});
  gradcheck([](const auto& x) { return x[0].min(0, true).values; }, {r({3, 4}, 36)});
  gradcheck([](const auto& x) { return x[0].max(); }, {r({3, 4}, 37)});
  gradcheck([](const auto& x) { return x[0].var({1}); }, {r({3, 4}, 38)});
  gradcheck([](const auto& x) { return x[0].var(false); }, {r({3, 4}, 39)});
  gradcheck([](const auto& x) { return x[0].std({0}, true, true); }, {r({3, 4}, 40)});
  gradcheck([](const auto& x) { return x[0].softmax(1); }, {r({3, 4}, 41)});
  gradcheck([](const auto& x) { return x[0].log_softmax(0); }, {r({3, 4}, 42)});
  gradcheck([](const auto& x) { return x[0].transpose(0, 1).log_softmax(-1); }, {r({3, 4}, 43)});
}

TEST_CASE("matrix products have correct gradients", "[core][autograd]") {
  gradcheck([](const auto& x) { return mm(x[0], x[1]); }, {r({2, 3}, 50), r({3, 4}, 51)});
  gradcheck([](const auto& x) { return mm(x[0].t(), x[1]); }, {r({3, 2}, 52), r({3, 4}, 53)});
  gradcheck([](const auto& x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); },
            {r({4}, 54), r({2, 3}, 55), r({3, 4}, 56)});
  gradcheck([](const auto& x) { return bmm(x[0], x[1]); }, {r({2, 2, 3}, 57), r({2, 3, 2}, 58)});
  gradcheck([](const auto& x) { return matmul(x[0], x[1]); }, {r({3}, 59), r({3}, 60)});
  gradcheck([](const auto& x) { return matmul(x[0], x[1]); }, {r({2, 3}, 61), r({3}, 62)});
  gradcheck([](const auto& x) { return matmul(x[0], x[1]); }, {r({3}, 63), r({3, 2}, 64)});
  gradcheck([](const auto& x) { return matmul(x[0], x[1]); },
            {r({2, 1, 2, 3}, 65), r({3, 3, 2}, 66)});
  gradcheck([](const auto& x) { return matmul(x[0], x[1]); }, {r({2, 2, 3}, 67), r({3, 4}, 68)});
}

TEST_CASE("views, joins and index ops have correct gradients", "[core][autograd]") {
  gradcheck([](const auto& x) { return x[0].view({3, 2}); }, {r({2, 3}, 70)});
  gradcheck([](const auto& x) { return x[0].t().reshape({6}); }, {r({2, 3}, 71)});
  gradcheck([](const auto& x) { return x[0].permute({2, 0, 1}) * 2; }, {r({2, 3, 2}, 72)});
  gradcheck([](const auto& x) { return x[0].narrow(1, 1, 2); }, {r({2, 3}, 73)});
  gradcheck([](const auto& x) { return x[0].select(0, 1); }, {r({2, 3}, 74)});
  gradcheck([](const auto& x) { return x[0].slice(1, 0, 5, 2); }, {r({2, 5}, 75)});
  gradcheck([](const auto& x) { return x[0].unsqueeze(1).squeeze(); }, {r({2, 3}, 76)});
  gradcheck([](const auto& x) { return x[0].expand({2, 3, 4}); }, {r({3, 1}, 77)});
  gradcheck([](const auto& x) { return x[0].flatten(); }, {r({2, 3}, 78)});
  gradcheck([](const auto& x) { return cat({x[0], x[1] * 2}, 1); }, {r({2, 1}, 79), r({2, 3}, 80)});
  gradcheck([](const auto& x) { return stack({x[0], x[1]}, 1); }, {r({2, 3}, 81), r({2, 3}, 82)});
  gradcheck([](const auto& x) { return x[0].chunk(2, 1)[1] * x[0].split(2, 1)[0]; },
            {r({2, 4}, 83)});
  gradcheck(
      [](const auto& x) {
        return x[0].index_select(1, tensor_of({2, 0, 2}));
      },
      {r({2, 3}, 84)});
  gradcheck(
      [](const auto& x) {
        return x[0].gather(1, tensor_of({{0, 0}, {2, 1}}));
      },
      {r({2, 3}, 85)});
  gradcheck(
      [](const auto& x) {
        return scatter_add(x[0], 1, tensor_of({{0, 0}, {2, 1}}), x[1]);
      },
      {r({2, 3}, 86), r({2, 2}, 87)});
  // Through float32 the function is only float32-accurate: a wider step keeps the central
  // difference above its rounding.
  gradcheck([](const auto& x) { return x[0].to(dtype::float32).to(dtype::float64) * x[0]; },
            {r({3}, 88)}, 1e-3, 1e-3);
  gradcheck([](const auto& x) { return x[0].clone() * x[0]; }, {r({3}, 89)});
}

TEST_CASE("gradients accumulate across backward calls", "[core][autograd]") {
  tensor w = tensor_of({1.0, 2.0}).requires_grad_();
  (w * 3).sum().backward();
  (w * w).sum().backward();
  CHECK(values_of(w.grad()) == std::vector<double>{3 + 2, 3 + 4});
  w.set_grad({});
  CHECK_FALSE(w.grad().defined());
  (w * 2).sum().backward();
  CHECK(values_of(w.grad()) == std::vector<double>{2, 2});
  CHECK(w.grad().dtype() == dtype::float32);
}

TEST_CASE("backward takes explicit gradients for non-scalar outputs", "[core][autograd]") {
  tensor x = tensor_of({1.0, 2.0, 3.0}).requires_grad_();
  tensor y = x * x;
  REQUIRE_THROWS_WITH(y.backward(),
                      Contains("grad can be implicitly created only for scalar outputs"));
  y.backward(tensor_of({1.0, 0.1, 0.01}), true);
  CHECK(close(values_of(x.grad()), {2, 0.4, 0.06}));
  REQUIRE_THROWS_WITH(y.backward(ones({2})),
                      Contains("gradient of shape [2] does not match the output's shape [3]"));
}

TEST_CASE("a freed graph cannot be run twice, a retained one can", "[core][autograd]") {
  tensor x = tensor_of({2.0}).requires_grad_();
  tensor y = (x * x).sum();
  y.backward({}, true);
  y.backward();
  CHECK(x.grad().item<double>() == 8);
  REQUIRE_THROWS_WITH(y.backward(), Contains("backward through the graph a second time"));
}

TEST_CASE("no_grad records nothing and detach cuts the graph", "[core][autograd]") {
  tensor x = tensor_of({1.0, 2.0}).requires_grad_();
  {
    no_grad guard;
    tensor y = x * 2;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  tensor y = x * 2;
  CHECK(y.requires_grad());
  CHECK(y.grad_fn()->name() == "MulBackward0");
  CHECK_FALSE(y.is_leaf());
  tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == y.storage());
  REQUIRE_THROWS_WITH(d.sum().backward(), Contains("does not require grad"));
  REQUIRE_THROWS_WITH(tensor_of({1, 2}).requires_grad_(),
                      Contains("only floating point tensors can require gradients"));
  REQUIRE_THROWS_WITH(y.requires_grad_(false),
                      Contains("only change requires_grad of leaf tensors"));
}

TEST_CASE("set_data points a leaf at another tensor's memory and keeps its own gradient",
          "[core][autograd]") {
  tensor a = tensor_of({1.0, 2.0}).requires_grad_();
  tensor b = tensor_of({5.0, 7.0}).requires_grad_();
  tensor handle = b; // another handle of b: it follows too
  b.set_data(a);
  CHECK(handle.storage() == a.storage());
  {
    no_grad guard;
    a.mul_(3); // an optimizer stepping a: b reads the new values
  }
  CHECK(values_of(b) == std::vector<double>{3.0, 6.0});
  (b * b).sum().backward(); // b's gradient, not a's
  CHECK(values_of(b.grad()) == std::vector<double>{6.0, 12.0});
  CHECK_FALSE(a.grad().defined());
  REQUIRE_THROWS_WITH(b.set_data(tensor_of({1.0, 2.0, 3.0})),
                      Contains("set_data: the source (float32 [3]) must have this tensor's dtype, "
                               "shape and device (float32 [2] on cpu)"));
}

TEST_CASE("in-place ops on graph tensors are refused or detected", "[core][autograd]") {
  tensor w = tensor_of({1.0, 2.0}).requires_grad_();
  REQUIRE_THROWS_WITH(
      w.add_(1),
      Contains("a leaf tensor that requires grad is being used in an in-place operation"));
  {
    no_grad guard;
    w.sub_(tensor_of({0.5, 0.5})); // an optimizer step
  }
  CHECK(values_of(w) == std::vector<double>{0.5, 1.5});
  tensor y = w * 2;
  REQUIRE_THROWS_WITH(y.mul_(2), Contains("not supported; use the out-of-place form"));
  tensor plain = zeros({2});
  REQUIRE_THROWS_WITH(plain.add_(w), Contains("an input that requires grad"));

  SECTION("a saved tensor modified after saving is reported at backward") {
    tensor a = tensor_of({1.0, 2.0});
    tensor z = (w * a).sum();
    a.mul_(10);
    REQUIRE_THROWS_WITH(z.backward(), Contains("has been modified by an in-place operation"));
  }
}

TEST_CASE("post-accumulate hooks fire as soon as each parameter's gradient is ready",
          "[core][autograd]") {
  // y = w2 @ relu(w1 @ x): backward reaches w2 before it has even computed w1's gradient.
  generator gen(3);
  tensor w1 = randn({4, 3}, {}, &gen).requires_grad_();
  tensor w2 = randn({2, 4}, {}, &gen).requires_grad_();
  tensor x = randn({3, 5}, {}, &gen);
  std::vector<std::string> events;
  w2.register_post_accumulate_grad_hook([&](const tensor& p) {
    events.push_back("w2");
    CHECK(p.grad().defined());
    CHECK_FALSE(w1.grad().defined()); // w1's gradient does not exist yet
  });
  w1.register_post_accumulate_grad_hook([&](const tensor& p) {
    events.push_back("w1");
    CHECK(p.grad().sizes() == shape_t{4, 3});
  });
  tensor h = mm(w1, x).relu();
  mm(w2, h).sum().backward();
  CHECK(events == std::vector<std::string>{"w2", "w1"});
  // A parameter used twice fires once per backward, after both contributions.
  int fired = 0;
  tensor v = tensor_of({1.0}).requires_grad_();
  v.register_post_accumulate_grad_hook([&](const tensor& p) {
    ++fired;
    CHECK(p.grad().item<double>() == 5);
  });
  (v * 2 + v * 3).sum().backward();
  CHECK(fired == 1);
}

TEST_CASE("a gradient destination becomes the leaf's gradient, written there or copied in, "
          "and a weight used twice sums both",
          "[core][autograd]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  generator gen(5);
  const tensor x = randn({5, 3}, {}, &gen);
  const tensor w0 = randn({3, 3}, {}, &gen), b0 = randn({3}, {}, &gen);
  // The weight is used twice: both linear nodes ask for its destination, one gets it.
  auto loss = [&](const tensor& w, const tensor& b) {
    const tensor h = nn::functional::linear(x, w, b).relu();
    return nn::functional::linear(h, w, b).pow(2).sum();
  };
  tensor w_ref = w0.clone().requires_grad_(), b_ref = b0.clone().requires_grad_();
  loss(w_ref, b_ref).backward();

  tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  const tensor dw = full({3, 3}, nan), db = full({3}, nan); // NaN: nothing may be read
  autograd::set_grad_destination(w, dw);
  autograd::set_grad_destination(b, db);
  loss(w, b).backward();
  CHECK(w.grad().data_ptr() == dw.data_ptr());
  CHECK(b.grad().data_ptr() == db.data_ptr());
  CHECK_THAT(values_of(w.grad()), Catch::Approx(values_of(w_ref.grad())));
  CHECK_THAT(values_of(b.grad()), Catch::Approx(values_of(b_ref.grad())));
  // A defined gradient is added to, where it is.
  loss(w, b).backward();
  CHECK(w.grad().data_ptr() == dw.data_ptr());
  CHECK_THAT(values_of(w.grad()), Catch::Approx(values_of(w_ref.grad().mul(2))));
  // Cleared (set_to_none), the next backward writes the destination afresh.
  zero_grads({w, b});
  loss(w, b).backward();
  CHECK_THAT(values_of(dw), Catch::Approx(values_of(w_ref.grad())));
  // Removed, backward leaves the gradient in memory of its own.
  autograd::set_grad_destination(w, tensor());
  zero_grads({w});
  loss(w, b).backward();
  CHECK(w.grad().data_ptr() != dw.data_ptr());

  CHECK_THROWS_WITH(autograd::set_grad_destination(w, zeros({3, 2})),
                    Contains("set_grad_destination: the destination ([3, 2], float32, cpu) must "
                             "have the leaf's shape, dtype and device ([3, 3], float32, cpu)"));
  CHECK_THROWS_WITH(autograd::set_grad_destination(w, zeros({3, 3}).t()),
                    Contains("must be contiguous"));
  CHECK_THROWS_WITH(autograd::set_grad_destination(x, zeros({5, 3})),
                    Contains("must be a leaf that requires grad"));
}

TEST_CASE("a leaf's gradient destination goes to one op per backward, linear's first, and "
          "to none while the leaf has a gradient",
          "[core][autograd]") {
  // Spy(w) = w, whose backward asks for w's destination and says whether it got one.
  std::vector<bool> got;
  auto spy = [&](const tensor& w) {
    tensor out = w.detach().clone();
    autograd::record(out, "Spy", {&w}, {}, [&got](const auto& g, const auto&) {
      tensor dest = autograd::input_grad_destination(0);
      got.push_back(dest.defined());
      if (!dest.defined())
        return std::vector<tensor>{g[0]};
      dest.copy_(g[0]);
      return std::vector<tensor>{dest};
    });
    return out;
  };
  generator gen(6);
  const tensor x = randn({5, 3}, {}, &gen);
  tensor w = randn({4, 3}, {}, &gen).requires_grad_();
  const tensor dest = zeros({4, 3});
  autograd::set_grad_destination(w, dest);
  // Two spies: one gets it (the later one, which backward runs first), the other does not.
  const tensor first = spy(w);
  (first + spy(w)).sum().backward();
  CHECK(got == std::vector<bool>{true, false});
  CHECK(w.grad().data_ptr() == dest.data_ptr());
  CHECK(values_of(w.grad()) == std::vector<double>(12, 2.0));
  // A defined gradient is added to: nobody gets the destination.
  got.clear();
  spy(w).sum().backward();
  CHECK(got == std::vector<bool>{false});
  // Linear after the spy runs first in backward and takes the destination for its GEMM.
  zero_grads({w});
  got.clear();
  const tensor spied = spy(w).sum(); // made first: its backward runs after linear's
  (spied + nn::functional::linear(x, w, tensor()).sum()).backward();
  CHECK(got == std::vector<bool>{false});
  CHECK(w.grad().data_ptr() == dest.data_ptr());
}

TEST_CASE("backward from a leaf accumulates into it like any leaf and fires its hooks",
          "[core][autograd]") {
  tensor w = tensor_of({1.0, 2.0}).requires_grad_();
  int fired = 0;
  w.register_post_accumulate_grad_hook([&](const tensor&) { ++fired; });
  const tensor g = tensor_of({0.5, 0.25});
  w.backward(g);
  w.backward(g);
  CHECK(fired == 2);
  CHECK(values_of(w.grad()) == std::vector<double>{1.0, 0.5});
  CHECK(values_of(g) == std::vector<double>{0.5, 0.25}); // the caller's gradient is not written
}

TEST_CASE("leaves that receive one gradient tensor keep separate gradients", "[core][autograd]") {
  // add's backward hands the same gradient tensor to both inputs.
  tensor a = tensor_of({1.0, 1.0}).requires_grad_();
  tensor b = tensor_of({2.0, 2.0}).requires_grad_();
  (a + b).backward(ones({2}));
  CHECK(a.grad().storage() != b.grad().storage());
  (a * 3 + b).backward(ones({2}));
  CHECK(values_of(a.grad()) == std::vector<double>{4, 4});
  CHECK(values_of(b.grad()) == std::vector<double>{2, 2});
}

TEST_CASE("deep graphs run and free without recursion", "[core][autograd]") {
  tensor x = tensor_of({1.0}).requires_grad_();
  tensor y = x;
  for (int i = 0; i < 200000; ++i)
    y = y + 1;
  y.sum().backward();
  CHECK(x.grad().item<double>() == 1);
  tensor z = x;
  for (int i = 0; i < 200000; ++i)
    z = z * 1.0;
  z = tensor(); // dropping a deep unused graph must not overflow the stack either
  CHECK(x.grad().item<double>() == 1);
}

TEST_CASE("gradients match the input's dtype through promotion", "[core][autograd]") {
  tensor a = tensor_of({1.0, 2.0}).requires_grad_(); // float32
  tensor b = tensor_of({3.0, 4.0}, {.dtype = dtype::float64}).requires_grad_();
  (a * b).sum().backward();
  CHECK(a.grad().dtype() == dtype::float32);
  CHECK(b.grad().dtype() == dtype::float64);
  CHECK(values_of(a.grad()) == std::vector<double>{3, 4});
  CHECK(values_of(b.grad()) == std::vector<double>{1, 2});
}

namespace custom {

// exp with its output saved: torch's first autograd.Function example.
struct my_exp : autograd::function<my_exp> {
  static tensor forward(autograd::function_context& ctx, const tensor& x) {
    CHECK_FALSE(grad_enabled()); // forward does not record, as torch's
    tensor y = x.exp();
    ctx.save_for_backward({y});
    return y;
  }
  static std::vector<tensor> backward(autograd::function_context& ctx,
                                      const std::vector<tensor>& grad_outputs) {
    return {grad_outputs[0] * ctx.get_saved_variables()[0]};
  }
};

// alpha * x * y with a number among the arguments; counts the gradients it computed.
struct scaled_mul : autograd::function<scaled_mul> {
  static inline int x_grads = 0, y_grads = 0;
  static tensor forward(autograd::function_context& ctx, const tensor& x, const tensor& y,
                        double alpha) {
    ctx.save_for_backward({x, y});
    ctx.saved_data["alpha"] = alpha;
    return x * y * alpha;
  }
  static std::vector<tensor> backward(autograd::function_context& ctx,
                                      const std::vector<tensor>& g) {
    const auto& s = ctx.get_saved_variables();
    const double alpha = std::any_cast<double>(ctx.saved_data.at("alpha"));
    tensor gx, gy; // only what is needed, as needs_input_grad says
    if (ctx.needs_input_grad(0)) {
      gx = g[0] * s[1] * alpha;
      ++x_grads;
    }
    if (ctx.needs_input_grad(1)) {
      gy = g[0] * s[0] * alpha;
      ++y_grads;
    }
    return {gx, gy, tensor()};
  }
};

struct identity : autograd::function<identity> {
  static tensor forward(autograd::function_context&, const tensor& x) { return x; }
  static std::vector<tensor> backward(autograd::function_context&, const std::vector<tensor>& g) {
    return {g[0] * 3}; // not the identity's gradient: tells it was this backward that ran
  }
};

struct one_grad_too_many : autograd::function<one_grad_too_many> {
  static const char* name() { return "Lopsided"; }
  static tensor forward(autograd::function_context&, const tensor& x) { return x * 2; }
  static std::vector<tensor> backward(autograd::function_context&, const std::vector<tensor>& g) {
    return {g[0] * 2, g[0]};
  }
};

} // namespace custom

TEST_CASE("a custom autograd function's forward and backward, saved tensors and name",
          "[core][autograd][function]") {
  gradcheck([](const auto& v) { return custom::my_exp::apply(v[0]); }, {r({3, 2}, 11)});
  const tensor x = tensor_of({0.0, 1.0}, {.requires_grad = true});
  const tensor y = custom::my_exp::apply(x);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "my_expBackward");
  CHECK(y.str() == "tensor([1.0000, 2.7183], grad_fn=<my_expBackward>)");
  (y * y).sum().backward(); // d/dx e^{2x} = 2 e^{2x}
  CHECK(close(values_of(x.grad()), {2.0, 2 * std::exp(2.0)}));
  CHECK(x.is_leaf());

  SECTION("no graph without an input that requires grad, or under no_grad") {
    CHECK_FALSE(custom::my_exp::apply(tensor_of({1.0})).requires_grad());
    no_grad guard;
    CHECK_FALSE(custom::my_exp::apply(x).requires_grad());
  }
  SECTION("a saved tensor modified in place before backward is an error there") {
    tensor a = tensor_of({1.0, 2.0}, {.requires_grad = true});
    tensor out = custom::my_exp::apply(a);
    const tensor loss = out.sum();
    out.detach().add_(1); // the saved output's storage changes
    REQUIRE_THROWS_WITH(loss.backward(), Contains("modified by an in-place operation"));
  }
}

TEST_CASE("a custom function with a number argument computes only the gradients needed",
          "[core][autograd][function]") {
  gradcheck([](const auto& v) { return custom::scaled_mul::apply(v[0], v[1], 0.5); },
            {r({2, 3}, 12), r({2, 3}, 13)});
  custom::scaled_mul::x_grads = custom::scaled_mul::y_grads = 0;
  const tensor x = tensor_of({1.0, 2.0}, {.requires_grad = true});
  const tensor y = tensor_of({3.0, 4.0}); // needs no gradient
  custom::scaled_mul::apply(x, y, 2.0).sum().backward();
  CHECK(values_of(x.grad()) == std::vector<double>{6, 8});
  CHECK(custom::scaled_mul::x_grads == 1);
  CHECK(custom::scaled_mul::y_grads == 0);
}

TEST_CASE("a custom function that returns its input leaves the input a leaf",
          "[core][autograd][function]") {
  const tensor x = tensor_of({1.0, 2.0}, {.requires_grad = true});
  const tensor y = custom::identity::apply(x);
  CHECK(x.is_leaf());
  CHECK_FALSE(x.grad_fn());
  CHECK(y.grad_fn()->name() == "identityBackward");
  y.sum().backward();
  CHECK(values_of(x.grad()) == std::vector<double>{3, 3});
}

TEST_CASE("a custom backward that returns the wrong number of gradients is a clear error",
          "[core][autograd][function]") {
  const tensor x = tensor_of({1.0}, {.requires_grad = true});
  const tensor y = custom::one_grad_too_many::apply(x);
  CHECK(y.grad_fn()->name() == "LopsidedBackward");
  REQUIRE_THROWS_WITH(y.sum().backward(),
                      Contains("LopsidedBackward: backward returned 2 gradients, but forward "
                               "took 1 arguments"));
}
