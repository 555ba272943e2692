// The backward engine: runs the recorded graph from some roots to the leaves.
#pragma once

#include <vector>

#include "core/tensor.hpp"

namespace actorch::autograd {

/// torch.autograd.backward: accumulates d(roots)/d(leaf) into every reachable leaf's grad.
/// `grads[i]` may be undefined for a one-element root (it then counts as 1).
void backward(const std::vector<tensor>& roots, const std::vector<tensor>& grads,
              bool retain_graph = false);

} // namespace actorch::autograd
