// `actorch bench tensor`: float32 GEMM at 1024^3 through OpenBLAS, elementwise add over 64 MiB
// operands (in place and out of place), and plain memcpy of the same size measured by the same
// program as the memory-bandwidth reference. Bandwidths count bytes read plus bytes written.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/linalg.hpp"

namespace actorch::bench {

namespace {

// Median seconds per call of fn, over repeats that together take at least min_seconds.
double time_per_call(const std::function<void()>& fn, double min_seconds) {
  using clock = std::chrono::steady_clock;
  fn(); // warm-up: page faults, caches, thread pools
  fn();
  std::vector<double> samples;
  const auto start = clock::now();
  while (samples.size() < 5 ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (samples.size() >= 1000)
      break;
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

const char* blas_threads() {
  const char* v = std::getenv("OPENBLAS_NUM_THREADS");
  return v ? v : "default";
}

} // namespace

void run_tensor(const tensor_options& opts, std::ostream& out) {
  generator gen(0);
  {
    const int64_t n = opts.gemm_size;
    const tensor a = rand({n, n}, {}, &gen), b = rand({n, n}, {}, &gen);
    const double s = time_per_call([&] { (void)mm(a, b); }, opts.min_seconds);
    out << "tensor op=gemm dtype=float32 m=" << n << " n=" << n << " k=" << n
        << " blas_threads=" << blas_threads() << " time_ms=" << s * 1e3
        << " gflops=" << 2.0 * double(n) * double(n) * double(n) / s / 1e9 << std::endl;
  }
  const int64_t elems = opts.add_bytes / 4;
  const double mib = double(opts.add_bytes) / double(1 << 20);
  {
    tensor a = rand({elems}, {}, &gen);
    const tensor b = rand({elems}, {}, &gen);
    const double s = time_per_call([&] { a.add_(b); }, opts.min_seconds);
    out << "tensor op=add_ dtype=float32 mib=" << mib << " time_ms=" << s * 1e3
        << " gbps=" << 3.0 * double(opts.add_bytes) / s / 1e9 << std::endl;
    const double s2 = time_per_call([&] { (void)(a + b); }, opts.min_seconds);
    out << "tensor op=add dtype=float32 mib=" << mib << " time_ms=" << s2 * 1e3
        << " gbps=" << 3.0 * double(opts.add_bytes) / s2 / 1e9 << std::endl;
  }
  {
    std::vector<char> src(size_t(opts.add_bytes), 1), dst(size_t(opts.add_bytes), 0);
    const double s =
        time_per_call([&] { std::memcpy(dst.data(), src.data(), src.size()); }, opts.min_seconds);
    out << "tensor op=memcpy mib=" << mib << " time_ms=" << s * 1e3
        << " gbps=" << 2.0 * double(opts.add_bytes) / s / 1e9 << std::endl;
  }
}

} // namespace actorch::bench
