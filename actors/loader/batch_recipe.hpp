// How a loader's samples become a batch, the same wherever the batch is made: in a worker (a
// thread or a process), on the consumer's thread (num_workers = 0), or in the coordinator (a
// user's source's uncollated batches). The loader fills one from its options and each of those
// places gets a copy (data_loader.cpp).
#pragma once

#include <cstdint>

#include "core/data/buffer_pool.hpp"
#include "core/data/collate.hpp"

namespace actorch::actors {

struct batch_recipe {
  int64_t batch_size = 1;     // iterable: samples per batch (with task.auto_collation)
  bool drop_last = false;     // iterable: drop the stream's (each worker's) last, short batch
  data::collate_fn collate;   // empty: default_collate into `pool` (default_convert unbatched)
  data::buffer_pool_ptr pool; // batch buffers; the pinned allocator's with pin_memory
  bool pin_memory = false;    // pin batches a custom collate_fn returns
};

} // namespace actorch::actors
