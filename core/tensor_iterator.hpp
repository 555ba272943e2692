// Builds kernels::strided_loop descriptions from tensors: broadcasts every operand to the
// output's shape (stride 0 on broadcast dims), drops size-1 dims and merges dims that are
// contiguous across all operands, so a contiguous op becomes one flat row.
#pragma once

#include <array>

#include "core/tensor.hpp"
#include "kernels/loop.hpp"

namespace actorch {

/// @pre every operand's shape broadcasts to out's shape (callers check and name the op).
template <int N>
kernels::strided_loop<N> make_loop(const tensor& out, std::array<const tensor*, N - 1> inputs);

/// Strides of `t` when viewed as broadcast to `shape` (0 on new or size-1 broadcast dims).
shape_t broadcast_strides(const tensor& t, const shape_t& shape);

/// Every in-place write calls this first: throws naming `op` when `out` has a broadcast
/// (stride 0) dim (writing it would race) or is a tensor autograd tracks (see
/// autograd::check_in_place), then bumps out's storage version so that tensors saved for
/// backward notice the write.
void check_writable(const tensor& out, const char* op);
/// `in`, or a copy of it when it overlaps `out` through a different layout (an in-place op
/// would otherwise read elements it has already written).
tensor unaliased_input(const tensor& out, const tensor& in);

/// Throws naming `op` unless every tensor is on the CPU: for the ops that have no CUDA kernel.
void check_cpu(const char* op, std::initializer_list<const tensor*> ts);
/// The device every tensor is on; throws naming `op` and two of the devices where they differ,
/// as PyTorch does ("expected all tensors to be on the same device, but found at least two
/// devices, cuda:0 and cpu").
device common_device(const char* op, std::initializer_list<const tensor*> ts);
/// `t` on `d`: a 0-dim CPU tensor moves to a GPU (PyTorch lets such a tensor stand for a number
/// next to CUDA tensors); any other tensor is returned as it is, for common_device to judge.
tensor scalar_to_device(const tensor& t, const device& d);
/// Throws naming `op` when a tensor is undefined.
void check_defined(const char* op, std::initializer_list<const tensor*> ts);

} // namespace actorch
