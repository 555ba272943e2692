// The reducer's buckets (reducer.cpp): which parameters travel together, where each one's
// gradient sits in its bucket, and the bucket's memory. Knows nothing of iterations or timing.
// See Note [In-place gradients] and Note [Buckets per device] in reducer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "comm/ddp/reducer.hpp"

namespace actorch::dist {

struct bucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets; // element offset of each parameter in `flat`
  tensor flat;                  // undefined when the group reduces in place
  size_t bytes = 0;
  std::vector<tensor> reduced_in_place; // in place: this iteration's tensor per slot
  size_t pending = 0;                   // parameters not yet ready this iteration
  work reduced; // the all-reduce, then the bucket's observers (Note [NCCL stream order])
};

class bucket_layout {
public:
  /// `in_place`: the group reduces gradients where they lie (no flat buffers).
  bucket_layout(const std::vector<tensor>& params, std::shared_ptr<replica_group> group,
                bool in_place)
      : params_(params), group_(std::move(group)), in_place_(in_place) {}

  /// New buckets holding the parameter indices of `assignment`, in launch order.
  void build(std::vector<std::vector<size_t>> assignment);
  /// Flat buffers from now on (a comm hook reduces flat buckets), same assignment.
  void make_flat();

  std::vector<bucket>& buckets() { return buckets_; }
  const std::vector<bucket>& buckets() const { return buckets_; }
  const std::vector<std::vector<size_t>>& assignment() const { return assignment_; }
  bool in_place() const { return in_place_; }
  /// Counts the builds: a change means new buckets (and new memory for them).
  uint64_t generation() const { return generation_; }
  /// (bucket, slot) of parameter i.
  std::pair<size_t, size_t> where(size_t i) const { return where_[i]; }
  /// Slot `slot` of bucket b within `of` (the bucket's flat buffer or a tensor like it), shaped
  /// as its parameter.
  tensor slot_view(size_t b, size_t slot, const tensor& of) const;
  /// Bucket b as a comm hook sees it.
  grad_bucket hooked(size_t b) const;

  /// The buckets as a bucket index per position of `order` (every parameter, in bucket order).
  std::vector<int64_t> choice(size_t positions) const;
  /// Buckets from such a choice over `order`.
  void build_from_choice(const std::vector<size_t>& order, const int64_t* choice);

private:
  const std::vector<tensor>& params_;
  std::shared_ptr<replica_group> group_;
  bool in_place_;
  std::vector<bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_; // parameter -> (bucket, slot)
  std::vector<std::vector<size_t>> assignment_;
  uint64_t generation_ = 0;
};

} // namespace actorch::dist
