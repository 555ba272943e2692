// Collate: a list of samples into one batch sample, as torch.utils.data.default_collate:
// tensors are stacked along a new batch dimension 0, ints become an int64 tensor, floats a
// float64 tensor and bools a bool tensor, strings stay a tuple of strings, and tuples and dicts
// are collated element by element (recursively). default_convert is what unbatched loading
// (batch_size = nullopt) applies to each sample instead. pin_memory copies a batch into pinned
// memory.
// The loader runs both inside its pipeline (actors/); they are plain functions usable anywhere.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/data/buffer_pool.hpp"
#include "core/data/sample.hpp"

namespace actorch::data {

/// A collate_fn: the samples of one batch in, the batch out.
using collate_fn = std::function<sample(std::vector<sample>)>;

/// default_collate. Stacked tensors come from `pool` when given (recycled batch buffers), from
/// the CPU allocator otherwise. As torch's: a batch whose sample 0 is a string (or a value that
/// collates as a sequence) is the samples as they are; sample 0's dict keys are the batch's;
/// tensors of several dtypes are promoted, or in a loader worker cast to sample 0's (Note
/// [Mixed dtypes in a stack] in collate.cpp). Throws actorch::error naming the sample (its
/// position in the batch) and the element path ("batch[2][0]['image']") when the samples do not
/// agree: kinds, tensor shapes, a cast a worker cannot make, tuple lengths, a key of sample 0's
/// missing; or for None.
sample default_collate(std::vector<sample> batch, buffer_pool* pool = nullptr);

/// default_collate one sample at a time, as a loader worker with the default collate_fn loads a
/// batch: the batch's buffers are taken when sample 0 arrives, and each sample is copied into its
/// row as it comes, so the caller may drop it at once (Note [Streaming collate] in collate.cpp).
/// add() at most batch_size samples in order, then finish(): the batch of those added, at least
/// one (fewer than batch_size, a stream's short last batch, gives the first rows of the buffers).
/// The same rules and errors as default_collate, which is this over a list; an error leaves the
/// collator unusable.
class collator {
public:
  explicit collator(int64_t batch_size, buffer_pool* pool = nullptr);
  collator(collator&&) noexcept;
  collator& operator=(collator&&) noexcept;
  ~collator();

  void add(const sample& s);
  sample finish();

private:
  struct node; // one element of the samples' structure, with its batch buffer
  std::unique_ptr<node> root_;
  int64_t size_, added_ = 0;
  buffer_pool* pool_;
};

/// default_convert: the collate of unbatched loading. Numbers become 0-dim tensors (int64,
/// float64, bool), tensors and strings stay as they are, tuples and dicts are converted element
/// by element; no batch dimension is added. (PyTorch converts numpy scalars and arrays and keeps
/// Python numbers; a C++ number plays the numpy scalar's part here.)
sample default_convert(sample s);

/// A copy of `s` whose tensors live in memory from `pool` (pinned when the pool's allocator is
/// pinned_allocator()); non-tensor values are kept.
sample pin_memory(const sample& s, buffer_pool& pool);

} // namespace actorch::data
