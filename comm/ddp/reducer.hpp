// DistributedDataParallel's gradient reducer: parameters grouped into buckets, each bucket
// all-reduced across the replicas the moment its last gradient is ready (a post-accumulate
// hook per parameter), so the exchange overlaps the rest of backward; backward returns only
// once every bucket is reduced and the averaged gradients are back in `.grad`.
// See Note [Bucket order] in reducer.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/ddp/replica_group.hpp"

namespace actorch::dist {

struct reducer_options {
  /// Bucket size limit (DistributedDataParallel's bucket_cap_mb).
  double bucket_cap_mb = 25;
  /// The first bucket's smaller limit (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB),
  /// so that the first exchange starts early in backward.
  double first_bucket_cap_mb = 1;
  /// Parameters the forward pass did not reach count as ready (their slot holds zeros) instead
  /// of leaving the buckets waiting; gradients of parameters no replica used stay untouched.
  bool find_unused_parameters = false;
  /// After each reduction the gradients are views into the buckets instead of copies of
  /// them (DistributedDataParallel's gradient_as_bucket_view): no copy out of the buckets;
  /// and backward writes each gradient into its bucket slot (the slot is the parameter's
  /// gradient destination, Note [Gradient destinations]), so none goes in either, also after
  /// zero_grad(set_to_none=true), where torch copies.
  bool gradient_as_bucket_view = false;
  /// Once the buckets follow the ready order, time a few iterations (when each gradient gets
  /// ready, what an all-reduce costs by size) and choose the bucket boundaries that end the
  /// last exchange earliest after backward, within bucket_cap_mb (Note [Adaptive buckets]).
  /// Rank 0's choice is broadcast, so every replica uses the same buckets. Off: torch's
  /// static assignment (a first bucket of first_bucket_cap_mb, then bucket_cap_mb each).
  bool adaptive_buckets = true;
};

/// Bucket boundaries over `bytes` (parameters in ready order, with `ready` times and dtypes
/// `kinds`), minimising when the last all-reduce ends if all-reduces run one at a time and an
/// all-reduce of n bytes takes latency + n * seconds_per_byte: a dynamic program over the
/// prefix ends. A bucket holds parameters of one kind only and at most `cap_bytes` (a lone
/// parameter may exceed it). Returns each position's bucket index (0, 1, ... in order).
std::vector<int64_t> choose_bucket_boundaries(const std::vector<double>& ready,
                                              const std::vector<size_t>& bytes,
                                              const std::vector<int>& kinds, size_t cap_bytes,
                                              double latency, double seconds_per_byte);

/// When the last all-reduce ends under that model with the buckets `bucket_of` (as
/// choose_bucket_boundaries returns them).
double predicted_bucket_end(const std::vector<double>& ready, const std::vector<size_t>& bytes,
                            const std::vector<int64_t>& bucket_of, double latency,
                            double seconds_per_byte);

/// "{cpu}", "{cuda:0, cuda:1}": a module's devices as torch's messages list them.
std::string devices_str(const std::set<device>& devices);

/// What bucketing needs of a parameter.
struct bucket_param {
  dtype type;
  device dev;
  size_t bytes;
};

/// Parameter indices per bucket, in launch order: parameters taken in `order` (their indices
/// into `params`), one open bucket per (dtype, device), a bucket closed once it holds
/// `first_cap_bytes` (the first of its kind) or `cap_bytes` (the others). torch's
/// compute_bucket_assignment_by_size, whose buckets hold one dtype on one device too: a module
/// on several devices gets buckets per device.
std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<bucket_param>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes);
std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes);

/// One bucket as a communication hook sees it (torch's dist.GradBucket): the flat gradients of
/// its parameters, this replica's, not yet averaged.
class grad_bucket {
public:
  grad_bucket(size_t index, bool last, tensor buffer, std::vector<tensor> gradients,
              std::vector<tensor> parameters, std::shared_ptr<replica_group> group)
      : index_(index), last_(last), buffer_(std::move(buffer)), gradients_(std::move(gradients)),
        parameters_(std::move(parameters)), group_(std::move(group)) {}
  /// Position in launch order; 0 is the first bucket backward fills.
  size_t index() const { return index_; }
  /// Whether this is the iteration's last bucket (torch's is_last).
  bool is_last() const { return last_; }
  /// The flat gradients; a hook may write into it, and may return it as its result.
  const tensor& buffer() const { return buffer_; }
  /// Each parameter's gradient as a view into buffer(), shaped as the parameter.
  const std::vector<tensor>& gradients() const { return gradients_; }
  const std::vector<tensor>& parameters() const { return parameters_; }
  /// The replicas to communicate with.
  replica_group& group() const { return *group_; }

private:
  size_t index_;
  bool last_;
  tensor buffer_;
  std::vector<tensor> gradients_, parameters_;
  std::shared_ptr<replica_group> group_;
};

/// torch's communication hook: given a bucket, starts whatever exchange it likes and returns a
/// work whose result()[0] is the bucket's averaged gradients (the buffer itself, or a tensor of
/// its size and dtype that the reducer copies in). Called on the backward thread, once per
/// bucket per iteration, in the same bucket order on every replica.
using comm_hook = std::function<work(grad_bucket&)>;

/// What the reducer reports as it goes (trace and tests): a bucket handed to the replica group
/// (`ready`, on the backward thread) or reduced (`reduced`, on the completing thread).
struct bucket_event {
  enum kind_t { ready, reduced } kind;
  int64_t iteration;
  size_t bucket;
  size_t bytes;
  std::chrono::steady_clock::time_point time;
};

class reducer {
public:
  /// Registers a post-accumulate hook on each parameter. `names` name them in errors.
  /// @pre params are leaves that require grad. On one device, it is the group's collective
  /// device; a module on several devices (torch's multi-device module) needs one replica per
  /// process, and its buckets on other devices than the collective one are reduced through a
  /// copy there (Note [Buckets per device]).
  reducer(std::vector<tensor> params, std::vector<std::string> names,
          std::shared_ptr<replica_group> replicas, reducer_options opts = {});
  ~reducer();
  reducer(const reducer&) = delete;
  reducer& operator=(const reducer&) = delete;

  /// Arms the reducer for the backward pass of `outputs` (DDP's forward calls it when gradients
  /// are to be synchronised). Rebuilds the buckets from the first iteration's ready order, once.
  /// With find_unused_parameters, walks the graph behind `outputs` to find the parameters it
  /// does not reach.
  void prepare_for_backward(const std::vector<tensor>& outputs);

  /// What a replica that ran out of inputs does in place of a training iteration while others
  /// go on (torch's Join): the iteration's collectives, as prepare_for_backward and a backward
  /// would issue them, with zeros for every gradient. The averages land in .grad as usual.
  void shadow_iteration();

  /// Parameter indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const;
  /// Whether the buckets were rebuilt from the observed ready order yet.
  bool buckets_rebuilt() const;
  /// Whether the buckets were chosen from measured timings yet (adaptive_buckets).
  bool buckets_adapted() const;
  /// torch's register_comm_hook: `hook` exchanges every bucket instead of the built-in
  /// average. Once, before the first backward. Buckets are then flat buffers even where the
  /// group reduces in place, and keep the first iteration's rebuild but not the adaptive
  /// choice (a hook's state, PowerSGD's, is kept per bucket index).
  void register_comm_hook(comm_hook hook);
  /// Called for each bucket_event. Must be thread-safe: `reduced` arrives on the thread that
  /// completes the collective.
  void set_observer(std::function<void(const bucket_event&)> fn);

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

} // namespace actorch::dist
