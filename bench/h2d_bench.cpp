// `actorch bench h2d`: host-to-device bandwidth (WORKLOADS.md h2d) through tensor::copy_ from
// pinned memory (non_blocking, queued back to back, one synchronisation per round) and from
// pageable memory (each copy synchronous, PyTorch's rule), next to a plain cudaMemcpyAsync
// loop from pinned memory: the ceiling the pinned copy is held to (90% of it, issue 25).
#include <chrono>
#include <functional>

#include "bench/bench.hpp"
#include "core/core.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"

#if ACTORCH_HAVE_CUDA
#include "kernels/cuda/check.hpp"
#endif

namespace actorch::bench {

namespace {

// GB/s of `copy` (moving `bytes` per call), called in rounds of `per_round` followed by a
// device synchronisation, for at least `min_seconds` after one warm-up round.
double gb_per_s(const std::function<void()>& copy, size_t bytes, int per_round,
                double min_seconds) {
  auto round = [&] {
    for (int i = 0; i < per_round; ++i)
      copy();
    cuda::synchronize();
  };
  round();
  int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    round();
    calls += per_round;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return double(bytes) * double(calls) / elapsed / 1e9;
}

} // namespace

void run_h2d(const h2d_options& o, std::ostream& out) {
  const device dev(o.device);
  ACTORCH_CHECK(dev.is_cuda(), "h2d: --device must be a GPU but got ", dev);
  const std::string problem = cuda_device_problem(dev.index);
  ACTORCH_CHECK(problem.empty(), "h2d: ", dev, ": ", problem);
  cuda::set_device(dev.index);
  const std::vector<std::pair<const char*, shape_t>> sizes = {{"batch", {64, 3, 32, 32}},
                                                              {"64MiB", {16 << 20}}};
  for (const auto& [name, shape] : sizes) {
    const tensor pinned = randn(shape, {.pin_memory = true});
    const tensor pageable = pinned.clone();
    tensor on_gpu = empty(shape, {.device = dev});
    const size_t bytes = pinned.nbytes();
    const int per_round = bytes < (1u << 20) ? 64 : 4;
    auto line = [&](const char* source, double gbs) {
      out << "h2d source=" << source << " size=" << name << " bytes=" << bytes
          << " GB_per_s=" << gbs << std::endl;
    };
    line("pinned", gb_per_s([&] { on_gpu.copy_(pinned, true); }, bytes, per_round, o.min_seconds));
    line("pageable",
         gb_per_s([&] { on_gpu.copy_(pageable, true); }, bytes, per_round, o.min_seconds));
#if ACTORCH_HAVE_CUDA
    const auto stream = static_cast<cudaStream_t>(cuda::current_stream().handle());
    line("cudaMemcpyAsync-pinned",
         gb_per_s(
             [&] {
               ACTORCH_CUDA_CHECK(cudaMemcpyAsync(on_gpu.data_ptr(), pinned.data_ptr(), bytes,
                                                  cudaMemcpyHostToDevice, stream));
             },
             bytes, per_round, o.min_seconds));
#endif
  }
}

} // namespace actorch::bench
