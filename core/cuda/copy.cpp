// Host <-> GPU and GPU <-> GPU copies (see copy.hpp). Each copy moves one contiguous block of
// the destination's dtype with cudaMemcpyAsync: the source is first made contiguous and
// converted on its own device, and a strided destination is filled from a contiguous staging
// tensor on its device.
#include "core/cuda/copy.hpp"

#include "core/cuda/stream.hpp"
#include "core/cuda_memory.hpp"
#include "core/ops/factory.hpp"

#if ACTORCH_HAVE_CUDA
#include "kernels/cuda/check.hpp"
#endif

namespace actorch::cuda {

bool is_pinned(const tensor& t) {
  return t.defined() && t.device().is_cpu() && t.storage()->owner() == pinned_allocator() &&
         pinned_memory_is_page_locked();
}

#if ACTORCH_HAVE_CUDA

namespace {

// `src` on its own device as a contiguous tensor of dst's shape and dtype (itself when it
// already is one).
tensor staged_source(const tensor& dst, const tensor& src) {
  tensor s = src.sizes() == dst.sizes() ? src : src.expand(dst.sizes());
  if (s.dtype() != dst.dtype())
    return s.to(dst.dtype());
  return s.contiguous();
}

} // namespace

void copy_across_devices(tensor dst, const tensor& src, bool non_blocking, bool source_pinned) {
  const tensor s = staged_source(dst, src);
  // The block lands in dst itself when dst is dense, else in a staging tensor on dst's device.
  const bool direct = dst.is_contiguous();
  tensor landing =
      direct ? dst : empty(dst.sizes(), {.dtype = dst.dtype(), .device = dst.device()});
  const size_t nbytes = landing.nbytes();
  if (nbytes == 0)
    return;
  const int gpu = dst.device().is_cuda() ? dst.device().index : src.device().index;
  device_guard guard(gpu);
  const stream on = current_stream(gpu);
  const auto raw = static_cast<cudaStream_t>(on.handle());
  if (dst.device().is_cpu()) {
    // GPU to host. A strided destination is filled on the host, once the block has arrived.
    ACTORCH_CUDA_CHECK(
        cudaMemcpyAsync(landing.data_ptr(), s.data_ptr(), nbytes, cudaMemcpyDeviceToHost, raw));
    if (!direct || !non_blocking || !is_pinned(dst))
      on.synchronize();
    if (!direct)
      dst.copy_(landing);
    return;
  }
  if (src.device().is_cuda()) {
    // GPU to GPU: after the source device's queued work (which produced s), and waited for
    // below (the source's stream could otherwise overwrite src, or free a staged s, while the
    // copy still reads it).
    on.wait_stream(current_stream(s.device().index));
    ACTORCH_CUDA_CHECK(cudaMemcpyPeerAsync(landing.data_ptr(), landing.device().index, s.data_ptr(),
                                           s.device().index, nbytes, raw));
  } else {
    ACTORCH_CUDA_CHECK(
        cudaMemcpyAsync(landing.data_ptr(), s.data_ptr(), nbytes, cudaMemcpyHostToDevice, raw));
  }
  if (!direct) // on dst's device, ordered after the block's arrival by the stream
    dst.copy_(landing);
  // Asynchronous only from pinned memory the caller owns: a host tensor staged here would be
  // freed before the copy read it.
  const bool async =
      non_blocking && src.device().is_cpu() && (is_pinned(s) || source_pinned) && s.is_same(src);
  if (!async)
    on.synchronize();
}

void read_to_host(void* dst, const void* src, size_t nbytes, int device) {
  device_guard guard(device);
  const stream on = current_stream(device);
  ACTORCH_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost,
                                     static_cast<cudaStream_t>(on.handle())));
  on.synchronize();
}

#else // !ACTORCH_HAVE_CUDA

void copy_across_devices(tensor, const tensor&, bool, bool) {
  fail_without_cuda("copy");
}

void read_to_host(void*, const void*, size_t, int) {
  fail_without_cuda("read_to_host");
}

#endif

} // namespace actorch::cuda
