// torch 1.13's *_multigpu collectives (torch.distributed.all_reduce_multigpu and the rest):
// each process passes a list of tensors, one per device it drives, and every (process, tensor)
// pair takes part, as if each were a rank of its own. Every process passes as many tensors, all
// of one shape and dtype; CUDA tensors of a list lie on distinct GPUs, as NCCL requires, and a
// machine without GPUs passes several CPU tensors. Ranks (src, dst) are global, as in the
// single-tensor collectives these are built on: the list is reduced locally on the group's
// collective device, one collective runs across the processes, and the results are copied back
// to each tensor (after the collective completes, with async_op too).
// band, bor and bxor are refused: the tensor core has no bitwise ops for the local reduction.
#pragma once

#include <vector>

#include "comm/distributed.hpp"

namespace actorch::dist {

/// Every tensor of every process ends up holding the reduction of all of them (AVG: divided by
/// world size times list length).
work all_reduce_multigpu(std::vector<tensor>& tensor_list, reduce_op op = reduce_op::sum,
                         const group& g = nullptr, bool async_op = false);
/// tensor_list[src_tensor] of rank src copied into every tensor of every process.
work broadcast_multigpu(std::vector<tensor>& tensor_list, int src, const group& g = nullptr,
                        bool async_op = false, int src_tensor = 0);
/// The reduction of every tensor of every process into tensor_list[dst_tensor] of rank dst;
/// the other tensors are left as they were.
work reduce_multigpu(std::vector<tensor>& tensor_list, int dst, reduce_op op = reduce_op::sum,
                     const group& g = nullptr, bool async_op = false, int dst_tensor = 0);
/// output_tensor_lists[i] (world size times n tensors) receives, at k * n + j, input j of the
/// process of group rank k, for every i: all of them on every device.
work all_gather_multigpu(std::vector<std::vector<tensor>>& output_tensor_lists,
                         const std::vector<tensor>& input_tensor_list, const group& g = nullptr,
                         bool async_op = false);
/// input_tensor_lists[i] holds world size times n tensors; output_tensor_list[j] of the process
/// of group rank k receives the reduction, over every process and every i, of
/// input_tensor_lists[i][k * n + j].
work reduce_scatter_multigpu(std::vector<tensor>& output_tensor_list,
                             const std::vector<std::vector<tensor>>& input_tensor_lists,
                             reduce_op op = reduce_op::sum, const group& g = nullptr,
                             bool async_op = false);

} // namespace actorch::dist
