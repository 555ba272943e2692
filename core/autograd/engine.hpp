// The backward engine: runs the recorded graph from some roots to the leaves.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.hpp"

namespace actorch::autograd {

/// torch.autograd.backward: accumulates d(roots)/d(leaf) into every reachable leaf's grad.
/// `grads[i]` may be undefined for a one-element root (it then counts as 1).
void backward(const std::vector<tensor>& roots, const std::vector<tensor>& grads,
              bool retain_graph = false);

/// Queues `fn` to run on this thread once the backward pass running on it has finished every
/// node (torch's Variable._execution_engine.queue_callback): how DistributedDataParallel waits
/// for its buckets before backward returns. Callbacks run in queue order; one that throws makes
/// backward throw (the rest are dropped). @pre called from inside a backward (a hook or a node).
void queue_callback(std::function<void()> fn);

} // namespace actorch::autograd
