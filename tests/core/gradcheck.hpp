// Central-difference gradient checks for tests (flashlight's jacobianTestImpl idea): the
// analytic gradient of sum(f(inputs) * w), w a fixed random weight, against finite differences
// for every element of every input, in float64.
#pragma once

#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "core/core.hpp"
#include "tests/core/values.hpp"

namespace actorch::test {

using fn = std::function<tensor(const std::vector<tensor>&)>;

// Checks the analytic gradients of sum(f(inputs) * w), w a fixed random weight, against
// central differences, for every element of every input.
inline void gradcheck(const fn& f, std::vector<tensor> inputs, double eps = 1e-6,
                      double tol = 1e-5) {
  generator gen(1234);
  for (auto& in : inputs)
    in = in.to(dtype::float64).detach().requires_grad_();
  const tensor out0 = f(inputs);
  const tensor w = rand(out0.sizes(), {.dtype = dtype::float64}, &gen).add(0.5);
  const tensor loss = (out0 * w).sum();
  loss.backward();
  auto value = [&](const std::vector<tensor>& xs) {
    no_grad guard;
    return (f(xs) * w).sum().item<double>();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i << " of shape " << shape_str(inputs[i].sizes()));
    const tensor analytic = inputs[i].grad();
    REQUIRE(analytic.defined());
    const auto a = values_of(analytic);
    const tensor base = inputs[i].detach().contiguous();
    for (int64_t k = 0; k < base.numel(); ++k) {
      std::vector<tensor> plus = inputs, minus = inputs;
      tensor p = base.clone(), m = base.clone();
      p.data_ptr<double>()[k] += eps;
      m.data_ptr<double>()[k] -= eps;
      plus[i] = p;
      minus[i] = m;
      const double numeric = (value(plus) - value(minus)) / (2 * eps);
      INFO("element " << k);
      REQUIRE(a[size_t(k)] == Approx(numeric).epsilon(tol).margin(tol));
    }
  }
}

} // namespace actorch::test
