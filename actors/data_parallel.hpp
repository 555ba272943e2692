// torch.nn.DataParallel on actors: one forward scatters the batch along `dim` into a chunk per
// replica, runs the replicas in parallel (a replica actor per device, each on a thread of its
// own), and gathers their outputs; backward runs the replicas' backward passes in parallel too
// and sums their gradients into the wrapped module's own parameters, so an optimizer over
// module.parameters() works unchanged.
//
//   auto model = std::make_shared<nn::sequential>(...);
//   nn::data_parallel dp(model, {0, 1});          // 2 replicas (CPU: 2 worker threads)
//   loss_fn(dp(x), y).backward();                 // model's parameters get the gradients
//
// As torch's: the replicas are copies (module::clone) re-synchronised with the module's
// parameters and buffers at every forward; the first replica's buffers (BatchNorm's running
// statistics) are copied back after it, as torch's device[0] replica shares them; a batch
// smaller than the replica count uses as many replicas as it has chunks (torch.chunk's sizes);
// an exception in a replica is rethrown naming it. See docs/architecture.md ("DataParallel").
// This header includes no CAF.
#pragma once

#include <memory>
#include <vector>

#include "core/nn/module.hpp"

namespace actorch::nn {

namespace detail {
class replica_engine; // the replica actors (data_parallel.cpp)
} // namespace detail

namespace parallel {

/// torch.nn.parallel.scatter for one tensor: `input` in at most n chunks along `dim`, of
/// torch.chunk's sizes (ceil(size / n) each, the last smaller; fewer than n chunks when the
/// batch is small). Views, so autograd flows back through them.
std::vector<tensor> scatter(const tensor& input, int64_t n, int64_t dim = 0);

/// torch.nn.parallel.gather: the outputs concatenated along `dim` (autograd flows through).
tensor gather(const std::vector<tensor>& outputs, int64_t dim = 0);

/// torch.nn.parallel.replicate: n copies of `m` (module::clone), each with m's values.
/// Unlike torch's, whose replicas' parameters are broadcast views that send gradients back to
/// m, these are independent copies (replicas run on threads of their own, so they do not share
/// autograd state); data_parallel sums their gradients back into m.
std::vector<std::shared_ptr<module>> replicate(const module& m, int64_t n);

/// torch.nn.parallel.parallel_apply: modules[i](inputs[i]) for every i at once, each on a
/// thread of its own (a replica actor); blocks until all are done. An exception in one is
/// rethrown as actorch::error naming the replica ("DataParallel: caught an error in replica 1
/// on device cpu:1: ..."), after every replica has finished. @pre as many modules as inputs.
std::vector<tensor> parallel_apply(const std::vector<std::shared_ptr<module>>& modules,
                                   const std::vector<tensor>& inputs);

} // namespace parallel

class data_parallel {
public:
  /// `device_ids`: one replica per id (on the CPU, a worker thread each); empty: one per
  /// hardware thread, as torch takes every visible GPU. `output_device` (default device_ids[0])
  /// must be one of them: on the CPU every output is host memory. `dim`: the batch dim.
  explicit data_parallel(std::shared_ptr<module> module, std::vector<int> device_ids = {},
                         int output_device = -1, int64_t dim = 0);
  ~data_parallel();
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  tensor forward(const tensor& input);
  tensor operator()(const tensor& input) { return forward(input); }

  module& wrapped() const { return *module_; }
  const std::shared_ptr<nn::module>& module_ptr() const { return module_; }
  const std::vector<int>& device_ids() const { return device_ids_; }

private:
  std::shared_ptr<nn::module> module_;
  std::vector<int> device_ids_;
  int64_t dim_;
  std::vector<std::shared_ptr<nn::module>> replicas_; // made at the first forward
  std::shared_ptr<detail::replica_engine> engine_;
};

} // namespace actorch::nn
