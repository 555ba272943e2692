// Creation ops and random streams: values by hand, dtype inference as torch does it, and
// reproducibility of seeded generators, from one thread and from many.
#include <cmath>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("filled tensors and their *_like forms", "[core][factory]") {
  CHECK(values_of(zeros({2})) == std::vector<double>{0, 0});
  CHECK(values_of(ones({2}, {.dtype = dtype::int8})) == std::vector<double>{1, 1});
  CHECK(full({2}, 7).dtype() == dtype::int64);
  CHECK(full({2}, 0.5).dtype() == dtype::float32);
  CHECK(full({2}, true).dtype() == dtype::bool_);
  tensor like = zeros({3, 1}, {.dtype = dtype::float64});
  CHECK(ones_like(like).dtype() == dtype::float64);
  CHECK(ones_like(like).sizes() == shape_t{3, 1});
  CHECK(full_like(like, 2, {.dtype = dtype::int32}).dtype() == dtype::int32);
  CHECK(empty({0}).numel() == 0);
  CHECK(scalar_tensor(3).dim() == 0);
}

TEST_CASE("tensors from data infer dtypes as torch.tensor does", "[core][factory]") {
  CHECK(tensor_of({1.5, 2.5}).dtype() == dtype::float32);
  CHECK(tensor_of({1, 2}).dtype() == dtype::int64);
  CHECK(tensor_of({true}).dtype() == dtype::bool_);
  tensor m = tensor_of({{1, 2, 3}, {4, 5, 6}});
  CHECK(m.sizes() == shape_t{2, 3});
  CHECK(m[1][0].item<int>() == 4);
  CHECK(as_tensor(std::vector<double>{1, 2}).dtype() == dtype::float64);
  CHECK(as_tensor(std::vector<bool>{true, false, true}, {3}).str() ==
        "tensor([ True, False,  True])");
  CHECK(as_tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}).sizes() == shape_t{2, 2});
  REQUIRE_THROWS_WITH(tensor_of({{1, 2}, {3}}), Contains("rows have different lengths"));
}

TEST_CASE("ranges match torch's endpoints and lengths", "[core][factory]") {
  CHECK(values_of(arange(5)) == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(5).dtype() == dtype::int64);
  CHECK(values_of(arange(1, 10, 3)) == std::vector<double>{1, 4, 7});
  CHECK(values_of(arange(5, 0, -2)) == std::vector<double>{5, 3, 1});
  CHECK(arange(0.0, 1.0, 0.25).dtype() == dtype::float32);
  CHECK(values_of(arange(0.0, 1.0, 0.25)) == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(values_of(range(0, 1, 0.25)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(values_of(linspace(-1, 1, 5)) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  CHECK(linspace(0, 1, 1).numel() == 1);
  CHECK(values_of(logspace(0, 3, 4)) == std::vector<double>{1, 10, 100, 1000});
  CHECK(values_of(logspace(0, 2, 3, 2.0)) == std::vector<double>{1, 2, 4});
  CHECK(values_of(eye(2, 3)) == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(values_of(eye(2)) == std::vector<double>{1, 0, 0, 1});
  REQUIRE_THROWS_WITH(arange(0, 5, 0), Contains("arange: step must be nonzero"));
  REQUIRE_THROWS_WITH(arange(5, 0, 1), Contains("inconsistent with the step's sign"));
  REQUIRE_THROWS_WITH(linspace(0, 1, -1),
                      Contains("number of steps must be non-negative but got -1"));
}

TEST_CASE("seeded generators give reproducible streams", "[core][factory][random]") {
  generator g1(42), g2(42), g3(43);
  tensor a = rand({100}, {}, &g1);
  tensor b = rand({100}, {}, &g2);
  tensor c = rand({100}, {}, &g3);
  CHECK(equal(a, b));
  CHECK_FALSE(equal(a, c));
  // The stream continues: the next draw differs from the first, and set_state replays it.
  const auto state = g1.get_state();
  tensor next = rand({100}, {}, &g1);
  CHECK_FALSE(equal(a, next));
  g1.set_state(state);
  CHECK(equal(next, rand({100}, {}, &g1)));
  g1.manual_seed(42);
  CHECK(equal(a, rand({100}, {}, &g1)));

  manual_seed(7);
  tensor d = randn({10});
  manual_seed(7);
  CHECK(equal(d, randn({10})));
}

TEST_CASE("random values have the right ranges and moments", "[core][factory][random]") {
  generator g(0);
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16}) {
    const auto v = values_of(rand({20000}, {.dtype = t}, &g));
    double sum = 0;
    for (double x : v) {
      REQUIRE(x >= 0);
      REQUIRE(x < 1);
      sum += x;
    }
    CHECK(sum / double(v.size()) == Approx(0.5).margin(0.01));
  }
  const auto n = values_of(normal(3.0, 2.0, {50000}, {.dtype = dtype::float64}, &g));
  double mean = 0, var = 0;
  for (double x : n)
    mean += x;
  mean /= double(n.size());
  for (double x : n)
    var += (x - mean) * (x - mean);
  var /= double(n.size() - 1);
  CHECK(mean == Approx(3.0).margin(0.05));
  CHECK(var == Approx(4.0).margin(0.1));

  const auto r = values_of(randint(-3, 4, {10000}, {}, &g));
  std::set<double> seen(r.begin(), r.end());
  CHECK(seen == std::set<double>{-3, -2, -1, 0, 1, 2, 3});
  auto p = values_of(randperm(50, {}, &g));
  std::sort(p.begin(), p.end());
  CHECK(p == values_of(arange(50)));
  REQUIRE_THROWS_WITH(randint(3, 3, {1}),
                      Contains("randint: expected low < high but got low=3, high=3"));
  REQUIRE_THROWS_WITH(rand({2}, {.dtype = dtype::int32}),
                      Contains("rand: expected a floating point dtype but got int32"));
  REQUIRE_THROWS_WITH(normal(0, -1, {2}), Contains("normal: std must be >= 0"));
}

TEST_CASE("one generator shared by threads hands out disjoint draws", "[core][factory][random]") {
  generator g(5);
  std::vector<tensor> parts(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < parts.size(); ++i)
    threads.emplace_back([&, i] { parts[i] = rand({1000}, {.dtype = dtype::float64}, &g); });
  for (auto& t : threads)
    t.join();
  // Every draw reserved its own counter range: no two threads got the same numbers, and the
  // generator advanced by exactly the total.
  std::set<double> all;
  for (const auto& p : parts)
    for (double v : values_of(p))
      all.insert(v);
  CHECK(all.size() == 4000);
  generator sequential(5);
  for (int i = 0; i < 4; ++i)
    rand({1000}, {.dtype = dtype::float64}, &sequential);
  CHECK(g.get_state() == sequential.get_state());
}

TEST_CASE("factories make leaves that require grad when asked, floating dtypes only",
          "[core][factory][autograd]") {
  generator g(1);
  const std::vector<tensor> leaves = {
      empty({2}, {.requires_grad = true}),
      zeros({2}, {.requires_grad = true}),
      ones({2}, {.dtype = dtype::float64, .requires_grad = true}),
      full({2}, 0.5, {.requires_grad = true}),
      arange(0.0, 1.0, 0.5, {.requires_grad = true}),
      linspace(0, 1, 3, {.requires_grad = true}),
      eye(2, -1, {.requires_grad = true}),
      rand({2}, {.requires_grad = true}, &g),
      randn({2}, {.requires_grad = true}, &g),
      normal(1.0, 2.0, {2}, {.requires_grad = true}, &g),
      tensor_of({1.0, 2.0}, {.requires_grad = true}),
      rand_like(zeros({2}), {.requires_grad = true}, &g),
  };
  for (const tensor& t : leaves) {
    CHECK(t.requires_grad());
    CHECK(t.is_leaf());
  }
  CHECK_FALSE(zeros({2}).requires_grad());
  // The leaf takes part in autograd as one made with requires_grad_() does.
  tensor x = ones({3}, {.requires_grad = true});
  (x * 2).sum().backward();
  CHECK(values_of(x.grad()) == std::vector<double>{2, 2, 2});
  REQUIRE_THROWS_WITH(zeros({2}, {.dtype = dtype::int64, .requires_grad = true}),
                      Contains("only floating point tensors can require gradients, but got int64"));
  REQUIRE_THROWS_WITH(randint(0, 3, {2}, {.requires_grad = true}),
                      Contains("only floating point tensors can require gradients"));
}

TEST_CASE("rand_like, randn_like and randint_like keep the shape and dtype of their model",
          "[core][factory][random]") {
  generator g(2);
  const tensor like = zeros({4, 5}, {.dtype = dtype::float64});
  const tensor r = rand_like(like, {}, &g);
  CHECK(r.sizes() == shape_t{4, 5});
  CHECK(r.dtype() == dtype::float64);
  CHECK(randn_like(like, {.dtype = dtype::float16}, &g).dtype() == dtype::float16);
  const tensor ri = randint_like(like, 3, 6, {}, &g);
  CHECK(ri.dtype() == dtype::float64); // torch.randint_like keeps a float model's dtype
  for (double v : values_of(ri))
    CHECK((v == 3 || v == 4 || v == 5));
  const tensor ints = zeros({1000}, {.dtype = dtype::int16});
  const auto drawn = values_of(randint_like(ints, 4, {}, &g));
  CHECK(randint_like(ints, 4, {}, &g).dtype() == dtype::int16);
  CHECK(std::set<double>(drawn.begin(), drawn.end()) == std::set<double>{0, 1, 2, 3});
  // The same draws as the factory with the model's shape, from the same generator state.
  generator a(9), b(9);
  CHECK(values_of(randn_like(like, {}, &a)) ==
        values_of(randn({4, 5}, {.dtype = dtype::float64}, &b)));
  REQUIRE_THROWS_WITH(rand_like(zeros({2}, {.dtype = dtype::int32})),
                      Contains("rand: expected a floating point dtype but got int32"));
}

TEST_CASE("normal takes a mean and a std per element, broadcast together",
          "[core][factory][random]") {
  generator g(3);
  // Two columns with their own mean and std; many rows to measure the moments.
  const tensor mean = tensor_of({{-5.0, 10.0}}, {.dtype = dtype::float64});
  const tensor std = full({10000, 1}, 0.5, {.dtype = dtype::float64});
  const tensor x = normal(mean, std, &g);
  CHECK(x.sizes() == shape_t{10000, 2});
  CHECK(x.dtype() == dtype::float64);
  const auto m = values_of(x.mean({0}));
  CHECK(m[0] == Approx(-5.0).margin(0.02));
  CHECK(m[1] == Approx(10.0).margin(0.02));
  const auto s = values_of(x.std({0}));
  CHECK(s[0] == Approx(0.5).margin(0.02));
  CHECK(s[1] == Approx(0.5).margin(0.02));
  // A std of zero gives the mean exactly; the scalar forms.
  CHECK(values_of(normal(tensor_of({1.0, 2.0}), zeros({2}), &g)) == std::vector<double>{1, 2});
  CHECK(normal(zeros({3}), 1.0, &g).sizes() == shape_t{3});
  CHECK(normal(0.0, ones({2, 2}), &g).sizes() == shape_t{2, 2});
  REQUIRE_THROWS_WITH(normal(zeros({2}), tensor_of({1.0, -1.0}), &g),
                      Contains("normal: expects all elements of std >= 0.0"));
  REQUIRE_THROWS_WITH(normal(zeros({2}, {.dtype = dtype::int64}), 1.0, &g),
                      Contains("normal: expected a floating point dtype but got int64"));
  REQUIRE_THROWS_WITH(normal(zeros({2}), ones({3}), &g), Contains("normal"));
}
