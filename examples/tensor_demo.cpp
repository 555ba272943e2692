// A short tour of actorch's tensor core, read top to bottom like a PyTorch notebook: create,
// view, broadcast, multiply, reduce, save for numpy. Built with the examples:
// build/release/examples/tensor_demo.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/core.hpp"

using namespace actorch;

int main() try {
  generator gen(0);

  std::cout << "# creation and views\n";
  tensor x = arange(6, {.dtype = dtype::float32}).view({2, 3});
  std::cout << "x = " << x << '\n';
  std::cout << "x.t() = " << x.t() << "  (a view: strides " << shape_str(x.t().strides()) << ")\n";
  std::cout << "x[1] = " << x[1] << '\n';

  std::cout << "\n# broadcasting and type promotion\n";
  tensor bias = tensor_of({10, 20, 30}, {.dtype = dtype::int32});
  std::cout << "x + bias = " << x + bias << '\n';
  std::cout << "bias * 2 = " << bias * 2 << '\n';
  std::cout << "bias / 4 = " << bias / 4 << "  (true division)\n";

  std::cout << "\n# a linear layer, relu and softmax\n";
  tensor w = randn({3, 4}, {}, &gen);
  tensor y = x.matmul(w).add(1).relu();
  std::cout << "relu(x @ w + 1) = " << y << '\n';
  tensor p = y.softmax(-1);
  std::cout << "softmax(.., -1) = " << p << '\n';
  std::cout << "rows sum to " << p.sum(shape_t{1}) << '\n';

  std::cout << "\n# reductions\n";
  tensor r = randn({4, 5}, {}, &gen);
  auto [values, indices] = r.max(1);
  std::cout << "r.max(1).indices = " << indices << '\n';
  std::cout << "r.mean() = " << r.mean() << ", r.std() = " << r.std() << '\n';

  std::cout << "\n# joining and indexing\n";
  tensor both = cat({x, x * 10}, 0);
  std::cout << "cat([x, 10x]) = " << both << '\n';
  std::cout << "index_select(rows 3, 0) = " << both.index_select(0, tensor_of({3, 0})) << '\n';

  const auto path = std::filesystem::temp_directory_path() / "actorch_demo.npy";
  save_npy(path.string(), p);
  std::cout << "\nsaved softmax to " << path.string()
            << " (numpy.load reads it); reloaded equal: " << std::boolalpha
            << equal(load_npy(path.string()), p) << '\n';
  std::filesystem::remove(path);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "tensor_demo: " << e.what() << "\n";
  return 1;
}
