// The loader's last stage for a GPU consumer (loader_options::device): each batch is copied to
// the GPU on a copy stream of its own while the consumer still works on the batch before it,
// and handed over with an event that the consumer's stream waits on. See Note [Device
// prefetch] in device_prefetch.cpp. No CAF; used by the range-for consumer (data_loader.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "core/cuda/stream.hpp"
#include "core/cuda/timeline.hpp"
#include "core/data/sample.hpp"
#include "core/device.hpp"

namespace actorch::actors {

class device_prefetch {
public:
  /// @pre `d` is a CUDA device that exists (throws naming it otherwise). `pinned`: the
  /// batches come in page-locked buffers (the loader's pool with pin_memory), which the copies
  /// then read asynchronously.
  device_prefetch(const device& d, bool pinned);
  /// Waits for the copies in flight (the loader may go away mid-epoch).
  ~device_prefetch();
  device_prefetch(const device_prefetch&) = delete;
  device_prefetch& operator=(const device_prefetch&) = delete;

  /// Starts copying `host`'s tensors to the device on the copy stream (asynchronously where
  /// they are pinned); `seq` travels with the batch.
  void push(data::sample host, int64_t seq);
  bool empty() const { return in_flight_.empty(); }

  struct ready {
    data::sample data; // on the device
    int64_t seq = -1;
  };
  /// The oldest batch pushed: the consumer's current stream now waits for its copy. It stays
  /// the loader's too, until the next take() or clear(), which release it safely.
  ready take();
  /// Releases every batch (at the end or abandonment of an epoch).
  void clear();

private:
  struct batch {
    data::sample host, on_device;
    int64_t seq;
    cuda::event copied;
  };
  void release_taken();

  device device_;
  bool pinned_;
  cuda::stream copy_stream_;
  std::optional<cuda::stream_timeline> timeline_; // while tracing: the copies in GPU time
  std::deque<batch> in_flight_;
  std::optional<batch> taken_; // the batch the consumer has now
};

} // namespace actorch::actors
