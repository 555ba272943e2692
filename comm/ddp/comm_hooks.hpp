// torch's built-in DDP communication hooks (torch.distributed.algorithms.ddp_comm_hooks), for
// distributed_data_parallel::register_comm_hook, with torch's names, arguments and arithmetic:
//
//   ddp.register_comm_hook(dist::hooks::fp16_compress_hook());
//   auto state = std::make_shared<dist::hooks::powersgd_state>(
//       dist::hooks::powersgd_options{.matrix_approximation_rank = 2, .start_powersgd_iter = 10});
//   ddp.register_comm_hook(dist::hooks::powersgd_hook(state));
//
// Each hook averages over the bucket's replica group (torch's state=None: the default group).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "comm/ddp/reducer.hpp"
#include "core/random.hpp"

namespace actorch::dist::hooks {

/// default_hooks.allreduce_hook: the buffer divided by the world size, then summed.
comm_hook allreduce_hook();
/// default_hooks.fp16_compress_hook: the buffer as float16, divided, summed, and back.
comm_hook fp16_compress_hook();
/// default_hooks.bf16_compress_hook: the same through bfloat16.
comm_hook bf16_compress_hook();

/// powerSGD_hook.PowerSGDState's arguments and defaults.
struct powersgd_options {
  int64_t matrix_approximation_rank = 1;
  /// Buckets are all-reduced uncompressed (vanilla) until this many iterations have run; torch
  /// asks for more than 1 with error feedback or warm start, since the buckets are rebuilt
  /// after the first iteration.
  int64_t start_powersgd_iter = 1000;
  /// A tensor is compressed only where (n + m) * rank * min_compression_rate < n * m.
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  /// Q of the last iteration starts the next one's power iteration, per tensor.
  bool warm_start = true;
  double orthogonalization_epsilon = 0;
  uint64_t random_seed = 0;
};

/// PowerSGD's state across iterations: the per-bucket error feedback and warm-start Qs.
struct powersgd_state {
  explicit powersgd_state(powersgd_options o = {});
  powersgd_options opts;
  int64_t iter = 0;                    // iterations seen (counted at each last bucket)
  generator rng;                       // the draws of the initial Qs, the same on every replica
  std::map<size_t, tensor> error_dict; // bucket index -> its error
  std::map<size_t, std::vector<tensor>> q_memory; // bucket index -> its Qs
  /// Bytes this replica sent into all-reduces under the hook so far (uncompressed ones
  /// included), for the benchmark's bytes-per-step figure.
  int64_t bytes_reduced = 0;
};

/// powerSGD_hook.powerSGD_hook: each bucket's tensors of 2 or more dims that compression pays
/// for are approximated by P Q^T of the given rank (one power iteration, P and Q all-reduced and
/// orthogonalised by Gram-Schmidt), the rest all-reduced as they are; with error feedback the
/// approximation's error is added to the next iteration's gradients.
comm_hook powersgd_hook(std::shared_ptr<powersgd_state> state);

/// Gram-Schmidt on the columns of the 2-D `m`, in place (torch's _orthogonalize; epsilon 0: a
/// zero column stays NaN as in torch, epsilon > 0 is added to each norm).
void orthogonalize(tensor& m, double epsilon = 0);

} // namespace actorch::dist::hooks
