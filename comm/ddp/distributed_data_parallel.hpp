// torch.nn.parallel.DistributedDataParallel: wraps a module replica so that backward leaves
// every replica with the average of all replicas' gradients, exchanged in buckets while
// backward runs (reducer.hpp). The replicas can be processes, trainer threads of one process
// sharing memory, or both (replica_group.hpp); the API is the same.
//
//   distributed_data_parallel ddp(model, group);
//   tensor loss = cross_entropy(ddp(x), y);
//   loss.backward();   // returns with averaged gradients
//   opt.step();
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "comm/ddp/reducer.hpp"
#include "comm/ddp/replica_group.hpp"
#include "core/nn/module.hpp"

namespace actorch::dist {

struct ddp_options {
  double bucket_cap_mb = 25;
  /// Parameters a forward pass does not use count as ready instead of leaving backward waiting.
  bool find_unused_parameters = false;
  /// The gradients become views into the communication buckets (torch's option of the same
  /// name and default): saves a copy of every gradient out of its bucket per step, and the
  /// copy in (backward writes into the buckets, also after the gradients were set to None,
  /// where torch copies). Such a gradient must not be
  /// detached in place or replaced by a tensor of another layout.
  bool gradient_as_bucket_view = false;
  /// Bucket boundaries chosen from measured timings after a few iterations (an actorch
  /// addition; reducer_options::adaptive_buckets). False: torch's static buckets.
  bool adaptive_buckets = true;
  /// Rank 0's buffers (BatchNorm's running statistics) overwrite the others' before each
  /// training-mode forward.
  bool broadcast_buffers = true;
  /// torch's device_ids: empty (torch's None) or the one GPU the module lies on, where forward
  /// then moves its input (torch's to_kwargs). Only for a module on one GPU: torch's error for a
  /// CPU module or a module on several devices (resolve_ddp_devices).
  std::vector<device> device_ids{};
  /// torch's output_device, device_ids[0] when unset; only with device_ids. As in torch 1.13 it
  /// is kept and not used further: the output stays where the module puts it.
  std::optional<device> output_device{};
};

/// torch's rules for device_ids and output_device, given the devices of the module's
/// parameters: every parameter on one device type; at most one device id; neither argument for
/// a CPU module or a multi-device module (torch's messages). actorch also refuses a device id
/// other than the module's own device, which torch leaves to fail in forward. Returns the
/// output device (device_ids[0] by default), or nothing without device_ids.
std::optional<device> resolve_ddp_devices(const std::set<device>& module_devices,
                                          const std::vector<device>& device_ids,
                                          const std::optional<device>& output_device);

class distributed_data_parallel {
public:
  /// Checks that every replica's parameters have the same names, shapes and dtypes (an error
  /// on every replica naming those that differ), broadcasts rank 0's parameters and buffers,
  /// and builds the buckets. Every replica constructs it at the same point.
  distributed_data_parallel(std::shared_ptr<nn::module> module,
                            std::shared_ptr<replica_group> replicas, ddp_options opts = {});

  /// The module's forward. When gradients are to be synchronised (grad mode on, outside
  /// no_sync), arms the reducer for the backward of its output. In training mode with
  /// broadcast_buffers, first copies rank 0's buffers to every replica (a collective: every
  /// replica runs the same training-mode forwards; evaluate on module() directly).
  tensor forward(const tensor& input);
  tensor operator()(const tensor& input) { return forward(input); }

  /// The wrapped module's state dict with torch's "module." prefix ("module.0.weight"), as
  /// torch's DistributedDataParallel is a module whose child "module" is the model.
  nn::named_tensors state_dict() const;
  /// Loads a state dict with the "module." prefix (DDP's own) or without it (the bare
  /// model's): nn::consume_ddp_prefix, then module().load_state_dict(strict). (torch's DDP
  /// takes prefixed keys only; its users strip or add the prefix by hand.)
  nn::incompatible_keys load_state_dict(nn::named_tensors state, bool strict = true);

  /// The arguments as resolved at construction (output_device defaulted to device_ids[0]).
  const std::vector<device>& device_ids() const { return opts_.device_ids; }
  std::optional<device> output_device() const { return opts_.output_device; }

  const ddp_options& options() const { return opts_; }
  nn::module& module() const { return *module_; }
  const std::shared_ptr<nn::module>& module_ptr() const { return module_; }
  replica_group& group() const { return *group_; }
  const std::shared_ptr<replica_group>& group_ptr() const { return group_; }
  dist::reducer& reducer() const { return *reducer_; }

  /// torch's no_sync(): forwards inside the guard arm no reduction, so their backward
  /// accumulates gradients locally; the first synchronised backward after it averages the
  /// accumulated sums.
  class no_sync_guard {
  public:
    explicit no_sync_guard(distributed_data_parallel& d) : d_(&d), prev_(d.sync_) {
      d.sync_ = false;
    }
    ~no_sync_guard() { d_->sync_ = prev_; }
    no_sync_guard(const no_sync_guard&) = delete;
    no_sync_guard& operator=(const no_sync_guard&) = delete;

  private:
    distributed_data_parallel* d_;
    bool prev_;
  };
  [[nodiscard]] no_sync_guard no_sync() { return no_sync_guard(*this); }
  bool require_backward_grad_sync() const { return sync_; }

  /// torch's register_comm_hook (comm_hooks.hpp has torch's built-in hooks): once, before the
  /// first forward.
  void register_comm_hook(comm_hook hook) { reducer_->register_comm_hook(std::move(hook)); }

  /// Rank 0's buffers on every replica (what forward does with broadcast_buffers).
  void sync_buffers();

  /// Join (join.hpp) sets this while its context is open: each forward first tells the joined
  /// replicas that this one is still training (one all-reduce of a count).
  void set_join_context(class join* j) { join_ = j; }
  class join* join_context() const {
    return join_;
  }

private:
  std::shared_ptr<nn::module> module_;
  std::shared_ptr<replica_group> group_;
  ddp_options opts_;
  std::unique_ptr<dist::reducer> reducer_;
  bool sync_ = true;
  class join* join_ = nullptr;
};

/// Throws on every replica, naming the parameters, when the replicas' parameters differ in
/// name, shape or dtype (what distributed_data_parallel's constructor runs first).
void verify_replica_parameters(replica_group& g, const nn::named_tensors& params);

} // namespace actorch::dist
