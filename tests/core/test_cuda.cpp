// The CUDA path. Tests tagged [cuda] compare every CUDA kernel with its CPU twin on random
// shapes (broadcast, strided, empty, large) and exercise streams, events and copies; without a
// GPU they pass at once, saying why they were skipped. The others run everywhere: the pieces of
// the CUDA path that a CPU can check (the element order of CUDA loops, the device checks).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

#include <catch2/catch.hpp>

#include "core/autograd/node.hpp"
#include "core/cuda/copy.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda/timeline.hpp"
#include "core/cuda_memory.hpp"
#include "core/nn/functional.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/index.hpp"
#include "core/ops/linalg.hpp"
#include "core/ops/quantize.hpp"
#include "core/ops/reduce.hpp"
#include "core/ops/shape_ops.hpp"
#include "core/ops/softmax.hpp"
#include "core/ops/window.hpp"
#include "core/tensor_iterator.hpp"
#include "tests/core/files.hpp"
#include "tests/core/gpu.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

namespace {

// The values of a GPU result against its CPU twin's: the same shape and dtype, integers and
// bools equal, floats within rtol (NaN matching NaN).
void check_twin(const tensor& gpu, const tensor& cpu, double rtol = 0) {
  INFO("shape " << shape_str(cpu.sizes()) << ", dtype " << dtype_name(cpu.dtype()));
  REQUIRE(gpu.device() == kGPU);
  REQUIRE(gpu.sizes() == cpu.sizes());
  REQUIRE(gpu.dtype() == cpu.dtype());
  const std::vector<double> g = values_of(gpu), c = values_of(cpu);
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      REQUIRE(std::isnan(g[i]));
      continue;
    }
    INFO("element " << i << ": gpu " << g[i] << ", cpu " << c[i]);
    REQUIRE((g[i] == c[i] || std::abs(g[i] - c[i]) <= rtol * (1 + std::abs(c[i]))));
  }
}

// The operand shapes the twins are compared on: plain, broadcast both ways, a scalar, empty,
// and large enough to take many blocks.
struct shape_pair {
  shape_t a, b;
};
const std::vector<shape_pair> kShapes = {
    {{5, 7}, {5, 7}}, {{4, 1, 3}, {2, 3}}, {{6}, {}}, {{}, {3, 2}}, {{0, 3}, {3}}, {{1 << 20}, {1}},
};

// Random values of `t` with some negative, zero and (for floats) fractional entries.
tensor random_of(const shape_t& shape, dtype t, generator& gen) {
  if (is_floating_point(t))
    return randn(shape, {.dtype = dtype::float64}, &gen).mul(3).to(t);
  if (t == dtype::bool_)
    return randint(0, 2, shape, {}, &gen).to(t);
  if (t == dtype::uint8)
    return randint(0, 200, shape, {}, &gen).to(t);
  return randint(-50, 50, shape, {}, &gen).to(t);
}

// A strided view of x with the same values: its transpose's transpose, via a copy laid out
// column-major, so the kernels see non-contiguous strides. Made on the device the kernels run
// on: to(device) copies into a contiguous tensor.
tensor strided(const tensor& x) {
  if (x.dim() < 2)
    return x;
  return x.transpose(0, 1).contiguous().transpose(0, 1);
}

double tolerance(dtype t) {
  switch (t) {
  case dtype::float32: return 1e-5;
  case dtype::float64: return 1e-12;
  case dtype::float16: return 2e-3;
  case dtype::bfloat16: return 1.6e-2;
  default: return 0;
  }
}

} // namespace

// Runs everywhere. -------------------------------------------------------------------------------

TEST_CASE("CUDA loops visit elements in the CPU loops' order", "[core][cuda_host]") {
  // element_pointers (what a CUDA thread computes for its element) against for_each_row's
  // enumeration, over broadcast, transposed, sliced and scalar operands.
  generator gen(7);
  const tensor a = randn({4, 5, 6}, {}, &gen);
  const std::vector<std::pair<tensor, tensor>> cases = {
      {empty({4, 5, 6}), a},
      {empty({6, 5, 4}), a.permute({2, 1, 0})},
      {empty({4, 3, 6}), a.slice(1, 0, 5, 2)},
      {empty({4, 5, 6}), randn({5, 1}, {}, &gen)},
      {empty({}), randn({}, {}, &gen)},
      {empty({3, 0}), randn({0}, {}, &gen)},
  };
  for (const auto& [out, in] : cases) {
    const kernels::strided_loop<2> loop = make_loop<2>(out, {&in});
    std::vector<std::pair<char*, char*>> rows;
    kernels::for_each_row(loop, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        rows.emplace_back(p[0] + i * s[0], p[1] + i * s[1]);
    });
    REQUIRE(int64_t(rows.size()) == loop.numel());
    for (int64_t i = 0; i < loop.numel(); ++i) {
      char* ptrs[2];
      kernels::element_pointers(loop, i, ptrs);
      REQUIRE(ptrs[0] == rows[size_t(i)].first);
      REQUIRE(ptrs[1] == rows[size_t(i)].second);
    }
  }
}

TEST_CASE("ops name both devices when their tensors are on different devices",
          "[core][cuda_host]") {
  // A tensor labelled cuda:0 over host memory: the device checks run before any kernel, so no
  // GPU is needed to see them refuse it.
  std::vector<float> memory(6, 1.0f);
  const tensor on_gpu = from_blob(memory.data(), {2, 3}, dtype::float32, {}, {}, kGPU);
  const tensor on_cpu = ones({2, 3});
  REQUIRE_THROWS_WITH(on_cpu + on_gpu,
                      Contains("add: expected all tensors to be on the same device, but found at "
                               "least two devices, cpu and cuda:0"));
  REQUIRE_THROWS_WITH(mm(on_cpu.t(), on_gpu), Contains("mm: expected all tensors to be on the same "
                                                       "device, but found at least two devices"));
  REQUIRE_THROWS_WITH(where(on_cpu.gt(0), on_gpu, on_cpu), Contains("cpu and cuda:0"));
}

TEST_CASE("without a GPU, CUDA tensors are refused with the reason", "[core][cuda_host]") {
  if (cuda::is_available()) {
    WARN("a GPU is present: the [cuda] tests cover this machine");
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda_unavailable_reason().empty());
  REQUIRE_THROWS_WITH(zeros({2}, {.device = kGPU}), Contains("cannot create a tensor on cuda:0: "));
  REQUIRE_THROWS_WITH(ones({2}).cuda(), Contains("cannot create a tensor on cuda:0"));
  REQUIRE_THROWS(cuda::stream::create());
  REQUIRE_THROWS(cuda::current_stream());
  CHECK_FALSE(ones({2}).is_pinned());
}

// Needs a GPU. -----------------------------------------------------------------------------------

TEST_CASE("CUDA binary ops match their CPU twins", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(1);
  const std::vector<dtype> types = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                                    dtype::int32,   dtype::int64,   dtype::uint8,   dtype::bool_};
  for (const shape_pair& s : kShapes)
    for (dtype t : types) {
      const tensor a = random_of(s.a, t, gen), b = random_of(s.b, t, gen);
      const tensor ga = strided(a.to(kGPU)), gb = b.to(kGPU);
      check_twin(ga + gb, a + b);
      check_twin(ga * gb, a * b);
      check_twin(maximum(ga, gb), maximum(a, b));
      check_twin(minimum(ga, gb), minimum(a, b));
      check_twin(ga.lt(gb), a.lt(b));
      check_twin(ga.eq(gb), a.eq(b));
      if (t != dtype::bool_) {
        check_twin(add(ga, gb, 3), add(a, b, 3));
        check_twin(ga - gb, a - b);
        check_twin(ga.ge(gb), a.ge(b));
      }
      if (is_floating_point(t)) {
        check_twin(ga / gb, a / b, tolerance(t));
        check_twin(pow(ga.abs(), gb), pow(a.abs(), b), 10 * tolerance(t));
      }
    }
}

TEST_CASE("CUDA unary ops, clamp, where and masked_fill match their CPU twins", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(2);
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16})
    for (const shape_pair& s : kShapes) {
      const tensor a = random_of(s.a, t, gen);
      const tensor ga = strided(a.to(kGPU));
      const double tol = tolerance(t) + 1e-6; // the device's exp/log/tanh are within 2 ulp
      check_twin(exp(ga), exp(a), tol);
      check_twin(log(ga.abs()), log(a.abs()), tol);
      check_twin(sqrt(ga.abs()), sqrt(a.abs()), tol);
      check_twin(tanh(ga), tanh(a), tol);
      check_twin(sigmoid(ga), sigmoid(a), tol);
      check_twin(relu(ga), relu(a));
      check_twin(-ga, -a);
      check_twin(clamp(ga, -1.0, 0.5), clamp(a, -1.0, 0.5));
      const tensor mask = a.gt(0);
      check_twin(where(mask.to(kGPU), ga, 7.0), where(mask, a, 7.0));
      tensor ma = a.clone(), mg = ga.clone();
      ma.masked_fill_(mask, -2.0);
      mg.masked_fill_(mask.to(kGPU), -2.0);
      check_twin(mg, ma);
    }
}

TEST_CASE("CUDA copies convert dtypes as the CPU does, between and across devices", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(3);
  const std::vector<dtype> types = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                                    dtype::int8,    dtype::uint8,   dtype::int16,   dtype::int32,
                                    dtype::int64,   dtype::bool_};
  for (dtype from : types)
    for (dtype to : types) {
      const tensor a = random_of({3, 17}, from, gen);
      check_twin(strided(a.to(kGPU)).to(to), a.to(to));
    }
  // Host -> strided device -> host, with broadcasting and a dtype change on the way.
  const tensor a = random_of({4, 1}, dtype::float64, gen);
  tensor g = zeros({5, 4}, {.device = kGPU}).t();
  g.copy_(a);
  check_twin(g, zeros({5, 4}).t().copy_(a));
  tensor host = empty({4, 5}).t();
  host.copy_(g.t());
  CHECK(values_of(host) == values_of(g.t()));
  CHECK(full({3}, 2.5, {.device = kGPU}).sum().item<double>() == 7.5);
  CHECK(arange(5, {.device = kGPU}).sum().item<int64_t>() == 10);
}

TEST_CASE("CUDA reductions match their CPU twins", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(4);
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::int32, dtype::bool_})
    for (const shape_t& shape :
         {shape_t{7, 300}, shape_t{300, 7}, shape_t{2, 3, 5}, shape_t{0, 4}, shape_t{1 << 18}})
      for (const shape_t& dims : {shape_t{}, shape_t{-1}, shape_t{0}}) {
        const tensor a = random_of(shape, t, gen);
        const tensor ga = a.to(kGPU);
        const double tol = is_floating_point(t) ? 4 * tolerance(t) : 0;
        check_twin(sum(ga, dims), sum(a, dims), tol);
        check_twin(any(ga, dims), any(a, dims));
        check_twin(all(ga, dims), all(a, dims));
        if (a.numel() > 0 && t != dtype::bool_) {
          check_twin(amax(ga, dims), amax(a, dims));
          check_twin(amin(ga, dims), amin(a, dims));
        }
        if (is_floating_point(t)) {
          check_twin(mean(ga, dims), mean(a, dims), tol);
          check_twin(var(ga, dims), var(a, dims), tol);
          check_twin(actorch::std(ga, dims), actorch::std(a, dims), tol);
        }
        if (a.numel() > 0 && t != dtype::bool_) {
          check_twin(argmax(ga, -1), argmax(a, -1));
          check_twin(argmin(ga, 0), argmin(a, 0));
        }
      }
  // NaN wins max and its first index is reported, as on the CPU.
  const tensor n = tensor_of({1.0, double(NAN), 3.0, double(NAN)});
  check_twin(argmax(n.to(kGPU), 0), argmax(n, 0));
  check_twin(amax(n.to(kGPU)), amax(n));
}

TEST_CASE("CUDA softmax and log_softmax match their CPU twins forward and backward", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(5);
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16})
    for (const shape_t& shape : {shape_t{64, 10}, shape_t{3, 1000, 4}, shape_t{2, 5000}})
      for (int64_t dim : {int64_t(-1), int64_t(1)}) {
        const tensor a = random_of(shape, t, gen), g = random_of(shape, t, gen);
        const tensor ga = a.to(kGPU), gg = g.to(kGPU);
        const double tol = 4 * tolerance(t);
        const tensor s = softmax(a, dim), l = log_softmax(a, dim);
        check_twin(softmax(ga, dim), s, tol);
        check_twin(log_softmax(ga, dim), l, tol);
        check_twin(softmax_backward(gg, s.to(kGPU), dim), softmax_backward(g, s, dim), tol);
        check_twin(log_softmax_backward(gg, l.to(kGPU), dim), log_softmax_backward(g, l, dim), tol);
      }
}

TEST_CASE("CUDA convolutions, pooling, unfold and fold match their CPU twins with gradients",
          "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(11);
  // f on CPU leaves and on GPU copies of them: outputs and every leaf's gradient compared.
  auto twins = [&](dtype t, const std::vector<shape_t>& shapes, auto f, double tol) {
    std::vector<tensor> cpu, gpu;
    for (const shape_t& s : shapes) {
      cpu.push_back(random_of(s, t, gen).requires_grad_(true));
      gpu.push_back(cpu.back().detach().to(kGPU).requires_grad_(true));
    }
    const tensor yc = f(cpu), yg = f(gpu);
    const tensor g = random_of(yc.sizes(), t, gen);
    yc.backward(g);
    yg.backward(g.to(kGPU));
    check_twin(yg.detach(), yc.detach(), tol);
    for (size_t i = 0; i < cpu.size(); ++i)
      check_twin(gpu[i].grad(), cpu[i].grad(), tol);
  };
  for (dtype t : {dtype::float32, dtype::float64}) {
    const double tol = t == dtype::float64 ? 1e-10 : 1e-4;
    twins(
        t, {{2, 6, 11, 9}, {4, 3, 3, 2}, {4}},
        [](const auto& v) {
          return conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2);
        },
        tol);
    twins(
        t, {{3, 4, 8, 8}, {5, 4, 4, 3}},
        [](const auto& v) { return conv2d(v[0], v[1], {}, 1, "same", 2); }, tol);
    twins(
        t, {{2, 3, 30}, {6, 3, 5}, {6}},
        [](const auto& v) { return conv1d(v[0], v[1], v[2], 2, 1); }, tol);
    twins(
        t, {{2, 3, 9, 7}},
        [](const auto& v) {
          return unfold(v[0], {2, 3}, 1, 1, {2, 1});
        },
        tol);
    twins(
        t, {{2, 12, 20}},
        [](const auto& v) {
          return fold(v[0], {5, 6}, 2, 1, 0, 1);
        },
        tol);
  }
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16}) {
    const double tol = 4 * tolerance(t);
    twins(
        t, {{2, 3, 13, 10}},
        [](const auto& v) { return max_pool2d(v[0], 3, int2(2, 1), 1, int2(1, 2), true); }, tol);
    twins(
        t, {{2, 3, 13, 10}},
        [](const auto& v) {
          return avg_pool2d(v[0], {3, 2}, 2, 1, true, false);
        },
        tol);
    twins(
        t, {{2, 3, 13, 10}},
        [](const auto& v) {
          return adaptive_avg_pool2d(v[0], {4, 7});
        },
        tol);
    twins(
        t, {{2, 3, 13, 10}},
        [](const auto& v) {
          return adaptive_max_pool2d(v[0], {5, 3});
        },
        tol);
  }
}

TEST_CASE("CUDA matrix products match their CPU twins, transposed and batched", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(6);
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16}) {
    const double tol = t == dtype::float64 ? 1e-12 : 20 * tolerance(t);
    const tensor a = random_of({33, 17}, t, gen), b = random_of({17, 9}, t, gen);
    const tensor ga = a.to(kGPU), gb = b.to(kGPU);
    check_twin(mm(ga, gb), mm(a, b), tol);
    check_twin(mm(gb.t(), ga.t()), mm(b.t(), a.t()), tol);
    const tensor bias = random_of({9}, t, gen);
    check_twin(addmm(bias.to(kGPU), ga, gb, 0.5, 2), addmm(bias, a, b, 0.5, 2), tol);
    const tensor x = random_of({4, 33, 17}, t, gen), y = random_of({4, 17, 9}, t, gen);
    check_twin(bmm(x.to(kGPU), y.to(kGPU)), bmm(x, y), tol);
    check_twin(matmul(x.to(kGPU), gb), matmul(x, b), tol); // b broadcast over the batch
    check_twin(mm(ga.slice(1, 0, 0), gb.slice(0, 0, 0)), mm(a.slice(1, 0, 0), b.slice(0, 0, 0)));
  }
  REQUIRE_THROWS_WITH(mm(ones({2, 2}, {.dtype = dtype::int64, .device = kGPU}),
                         ones({2, 2}, {.dtype = dtype::int64, .device = kGPU})),
                      Contains("not implemented for int64"));
}

TEST_CASE("autograd runs on CUDA tensors and moves gradients back across devices", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(8);
  const tensor w = randn({5, 3}, {}, &gen), x = randn({4, 5}, {}, &gen);
  tensor wc = w.clone().requires_grad_(), wg = w.to(kGPU).requires_grad_();
  log_softmax(matmul(x, wc).tanh(), -1).sum().backward();
  log_softmax(matmul(x.to(kGPU), wg).tanh(), -1).sum().backward();
  check_twin(wg.grad(), wc.grad(), 1e-5);
  // A leaf on the CPU used on the GPU gets its gradient on the CPU.
  tensor leaf = randn({3}, {}, &gen).requires_grad_();
  (leaf.to(kGPU) * 2).sum().backward();
  REQUIRE(leaf.grad().device() == kCPU);
  CHECK(values_of(leaf.grad()) == std::vector<double>{2, 2, 2});
}

TEST_CASE("on CUDA, mm_out and a linear weight's gradient destination give the CPU's values",
          "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(9);
  const tensor a = randn({33, 17}, {}, &gen), b = randn({17, 9}, {}, &gen);
  const tensor out = full({33, 9}, std::nan(""), {.device = kGPU});
  mm_out(out, a.to(kGPU), b.to(kGPU));
  check_twin(out, mm(a, b), 1e-4);
  // The weight's gradient made in its destination on the GPU (Note [Gradient destinations]).
  const tensor x = randn({6, 5}, {}, &gen), w = randn({4, 5}, {}, &gen),
               bias = randn({4}, {}, &gen);
  tensor wc = w.clone().requires_grad_(), bc = bias.clone().requires_grad_();
  nn::functional::linear(x, wc, bc).tanh().sum().backward();
  tensor wg = w.to(kGPU).requires_grad_(), bg = bias.to(kGPU).requires_grad_();
  const tensor dest = full({4, 5}, std::nan(""), {.device = kGPU});
  autograd::set_grad_destination(wg, dest);
  nn::functional::linear(x.to(kGPU), wg, bg).tanh().sum().backward();
  REQUIRE(wg.grad().data_ptr() == dest.data_ptr());
  check_twin(wg.grad(), wc.grad(), 1e-5);
  check_twin(bg.grad(), bc.grad(), 1e-5);
}

TEST_CASE("streams and events order work, and copies follow PyTorch's non_blocking rule",
          "[cuda]") {
  SKIP_WITHOUT_GPU();
  const cuda::stream side = cuda::stream::create();
  CHECK(cuda::current_stream() == cuda::stream::default_stream());
  const tensor host = arange(1 << 20, {.dtype = dtype::float32, .pin_memory = true});
  REQUIRE(host.is_pinned());
  tensor dev = empty({1 << 20}, {.device = kGPU});
  cuda::event start(true), done(true);
  {
    cuda::stream_guard on(side);
    CHECK(cuda::current_stream() == side);
    start.record();
    dev.copy_(host, true); // asynchronous on `side`
    dev.mul_(2);
    done.record();
  }
  CHECK(cuda::current_stream() == cuda::stream::default_stream());
  done.wait(cuda::current_stream()); // the default stream reads dev only after `side` wrote it
  const double total = dev.sum().item<double>();
  CHECK(total == 2.0 * (double(1 << 20) - 1) * double(1 << 20) / 2);
  done.synchronize();
  CHECK(done.query());
  CHECK(start.elapsed_time(done) > 0); // a 4 MiB copy and a pass over it take time
  side.synchronize();
  CHECK(side.query());
  // From pageable memory, non_blocking or not, the data has arrived when copy_ returns.
  std::vector<float> pageable(1000, 3.0f);
  tensor src = from_blob(pageable.data(), {1000}, dtype::float32);
  tensor d2 = empty({1000}, {.device = kGPU});
  d2.copy_(src, true);
  pageable.assign(1000, -1.0f); // the copy must not see this
  CHECK(d2.sum().item<double>() == 3000.0);
  cuda::synchronize();
}

TEST_CASE("CUDA tensors take their memory from the caching allocator", "[cuda]") {
  SKIP_WITHOUT_GPU();
  cuda::synchronize();
  const size_t before = cuda_memory_allocated(0);
  {
    const tensor t = empty({1 << 20}, {.device = kGPU});
    CHECK(cuda_memory_allocated(0) >= before + (size_t(4) << 20));
    CHECK(cuda_memory_reserved(0) >= cuda_memory_allocated(0));
  }
  CHECK(cuda_memory_allocated(0) == before);
}

TEST_CASE("CUDA indexing, cat, quantization and the losses match their CPU twins", "[cuda]") {
  SKIP_WITHOUT_GPU();
  generator gen(9);
  const tensor a = randn({6, 8, 5}, {}, &gen), ga = a.to(kGPU);
  const tensor idx = randint(0, 8, {11}, {}, &gen);
  check_twin(index_select(ga, 1, idx.to(kGPU)), index_select(a, 1, idx));
  const tensor gidx = randint(0, 8, {6, 3, 5}, {}, &gen);
  check_twin(gather(ga, 1, gidx.to(kGPU)), gather(a, 1, gidx));
  const tensor src = randn({6, 3, 5}, {.dtype = dtype::float64}, &gen);
  const tensor base = zeros({6, 8, 5}, {.dtype = dtype::float64});
  check_twin(scatter_add(base.to(kGPU), 1, gidx.to(kGPU), src.to(kGPU)),
             scatter_add(base, 1, gidx, src), 1e-12);
  REQUIRE_THROWS_WITH(index_select(ga, 1, tensor_of({int64_t(2), int64_t(8)}).to(kGPU)),
                      Contains("index_select: index 8 is out of bounds for dim 1 with size 8"));
  check_twin(cat({ga, ga.slice(1, 0, 2)}, 1), cat({a, a.slice(1, 0, 2)}, 1));
  for (qdtype q : {qdtype::qint8, qdtype::quint8, qdtype::qint32}) {
    const quantized_tensor qc = quantize_per_tensor(a, 0.05, 3, q);
    const quantized_tensor qg = quantize_per_tensor(ga, 0.05, 3, q);
    check_twin(qg.int_repr(), qc.int_repr());
    check_twin(qg.dequantize(), qc.dequantize());
  }
  const tensor logits = randn({32, 10}, {}, &gen), target = randint(0, 10, {32}, {}, &gen);
  namespace F = nn::functional;
  check_twin(F::cross_entropy(logits.to(kGPU), target.to(kGPU)), F::cross_entropy(logits, target),
             1e-5);
  REQUIRE_THROWS_WITH(
      F::nll_loss(logits.to(kGPU), full({32}, int64_t(10), {.device = kGPU})),
      Contains("nll_loss: target 10 at position 0 is out of bounds for 10 classes"));
}

TEST_CASE("a stream timeline puts GPU work in the trace in host time", "[cuda]") {
  SKIP_WITHOUT_GPU();
  trace::clear();
  trace::enable();
  const cuda::stream side = cuda::stream::create();
  const auto before = trace::clock::now();
  {
    cuda::stream_timeline timeline(side, "test stream");
    cuda::stream_guard on(side);
    tensor t = zeros({1 << 22}, {.device = kGPU});
    timeline.begin("adds");
    for (int k = 0; k < 10; ++k)
      t.add_(1);
    timeline.end();
    timeline.flush(true);
  }
  const auto after = trace::clock::now();
  trace::enable(false);
  const std::string path = (test::scratch_dir("cuda") / "timeline.json").string();
  trace::write_chrome_json(path, 0, "test");
  const std::string json = test::read_file(path);
  CHECK(json.find("\"test stream\"") != std::string::npos);
  // The span lies where the host saw the work happen (ts and dur in us of the steady clock),
  // and lasts: 10 passes over 16 MiB take time on any GPU.
  const size_t at = json.find("\"name\":\"adds\",\"ts\":");
  REQUIRE(at != std::string::npos);
  const char* p = json.c_str() + at + std::string("\"name\":\"adds\",\"ts\":").size();
  char* rest = nullptr;
  const double ts = std::strtod(p, &rest);
  REQUIRE(std::string(rest).rfind(",\"dur\":", 0) == 0);
  const double dur = std::strtod(rest + std::string(",\"dur\":").size(), nullptr);
  auto us = [](trace::clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
  };
  CHECK(dur > 0);
  CHECK(ts >= us(before) - 1000); // the anchor's host time may be late by its wake-up
  CHECK(ts + dur <= us(after) + 1000);
  trace::clear();
}
