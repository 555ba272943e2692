// Copying batches to the GPU ahead of the consumer.
#include "actors/loader/device_prefetch.hpp"

#include "base/error.hpp"
#include "core/allocator.hpp"
#include "core/cuda/copy.hpp"
#include "core/ops/factory.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

// Note [Device prefetch]
// ~~~~~~~~~~~~~~~~~~~~~~
// The copy of batch k + 1 is queued on the copy stream when the consumer takes batch k, so it
// runs while the consumer's stream computes on batch k; the consumer's stream waits for the
// copy's event only when it takes batch k + 1. Two hazards:
//  - the device memory of a batch came from the copy stream's pool (the caching allocator
//    hands a block to the stream current when allocating), so once the consumer lets it go it
//    could be the target of the next copy while the consumer's kernels still read it: take()
//    records the consumer's stream on each of its tensors (record_stream), and the allocator
//    hands the memory out again only after what that stream had queued when it was freed;
//  - batch k's pinned host buffers go back to the loader's pool, where a worker may overwrite
//    them, only once their copy has completed (release_taken waits for its event; by then it
//    has long completed).
// From pageable memory (pin_memory off) each copy returns only once done (PyTorch's rule), so
// nothing overlaps: set pin_memory with device, as with .to(device, non_blocking=True).

device_prefetch::device_prefetch(const device& d, bool pinned)
    : device_(d), pinned_(pinned), copy_stream_(cuda::stream::create(d.index)) {
  if (trace::enabled())
    timeline_.emplace(copy_stream_, "loader copy stream (" + d.str() + ")");
}

device_prefetch::~device_prefetch() {
  try {
    clear();
    copy_stream_.synchronize();
  } catch (const std::exception&) {
    // A failed device at teardown: nothing left to order.
  }
}

namespace {
// A custom value is shared by copies of a sample, so its tensors are replaced in place: the
// host tensors may then be freed at once, and such a batch is copied synchronously.
bool has_custom(const data::sample& s) {
  switch (s.type()) {
  case data::sample::kind::custom: return true;
  case data::sample::kind::tuple:
    for (const data::sample& x : s.as_tuple())
      if (has_custom(x))
        return true;
    return false;
  case data::sample::kind::dict:
    for (const auto& kv : s.as_dict())
      if (has_custom(kv.second))
        return true;
    return false;
  default: return false;
  }
}
} // namespace

void device_prefetch::push(data::sample host, int64_t seq) {
  trace::span s("loader", "copy batch to GPU");
  cuda::stream_guard on(copy_stream_);
  if (timeline_)
    timeline_->begin("copy batch " + std::to_string(seq), "\"seq\": " + std::to_string(seq));
  data::sample copy = host;
  const bool async = !has_custom(host);
  copy.for_each_tensor([&](tensor& t) {
    tensor d = actorch::empty(t.sizes(), {.dtype = t.dtype(), .device = device_});
    cuda::copy_across_devices(d, t, async, async && pinned_);
    t = d;
  });
  if (timeline_)
    timeline_->end();
  batch b{std::move(host), std::move(copy), seq, cuda::event()};
  b.copied.record(copy_stream_);
  in_flight_.push_back(std::move(b));
}

device_prefetch::ready device_prefetch::take() {
  ACTORCH_CHECK(!in_flight_.empty(), "DataLoader: no batch in flight on the GPU");
  release_taken();
  taken_ = std::move(in_flight_.front());
  in_flight_.pop_front();
  const cuda::stream consumer = cuda::current_stream(device_.index);
  taken_->copied.wait(consumer);
  taken_->on_device.for_each_tensor([&](tensor& t) { t.record_stream(consumer); });
  return {taken_->on_device, taken_->seq};
}

void device_prefetch::release_taken() {
  if (!taken_)
    return;
  taken_->copied.synchronize();
  taken_.reset();
  if (timeline_)
    timeline_->flush();
}

void device_prefetch::clear() {
  release_taken();
  for (batch& b : in_flight_)
    b.copied.synchronize();
  in_flight_.clear();
  if (timeline_)
    timeline_->flush(true);
}

} // namespace actorch::actors
