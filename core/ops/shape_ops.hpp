// Joining tensors: cat along an existing dim and stack along a new one, with PyTorch's type
// promotion across the inputs. Each input is copied once into a slice of a new tensor.
#pragma once

#include <vector>

#include "core/tensor.hpp"

namespace actorch {

/// torch.cat: the inputs joined along `dim`; every other dim must match. The result's dtype is
/// promote_types over all inputs. 1-D empty tensors (shape [0]) are skipped whatever their
/// rank, PyTorch's legacy behaviour. @pre a non-empty list without 0-dim tensors.
tensor cat(const std::vector<tensor>& tensors, int64_t dim = 0);

/// torch.stack: the inputs, all of one shape, joined along a new dim `dim`
/// (in [-(ndim + 1), ndim]). @pre a non-empty list.
tensor stack(const std::vector<tensor>& tensors, int64_t dim = 0);

} // namespace actorch
