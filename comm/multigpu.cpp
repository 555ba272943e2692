// The *_multigpu collectives over the single-tensor ones: checks of the lists, the local
// reduction over a process's tensors, and the copies back once the collective is done.
#include "comm/multigpu.hpp"

#include <set>

#include "base/error.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::dist {

namespace {

// One shape and dtype throughout; CUDA tensors on distinct GPUs.
void check_list(const char* op, const std::vector<tensor>& ts, const char* what = "tensor_list") {
  ACTORCH_CHECK(!ts.empty(), op, ": ", what, " is empty; it takes one tensor per device");
  std::set<device> gpus;
  for (size_t i = 0; i < ts.size(); ++i) {
    ACTORCH_CHECK(ts[i].defined(), op, ": ", what, "[", i, "] is undefined");
    ACTORCH_CHECK(ts[i].sizes() == ts[0].sizes() && ts[i].dtype() == ts[0].dtype(), op, ": ", what,
                  "[", i, "] is ", dtype_name(ts[i].dtype()), " of shape ",
                  shape_str(ts[i].sizes()), " but ", what, "[0] is ", dtype_name(ts[0].dtype()),
                  " of shape ", shape_str(ts[0].sizes()),
                  "; every tensor of the list must have the same shape and dtype");
    if (ts[i].device().is_cuda())
      ACTORCH_CHECK(gpus.insert(ts[i].device()).second, op, ": ", what, " holds two tensors on ",
                    ts[i].device(), "; its CUDA tensors must lie on distinct GPU devices");
  }
}

// The other side's lists of all_gather (outputs) and reduce_scatter (inputs): one per tensor of
// this side's list (`n` of them, each like `like`), each of `per_list` (world size times n)
// tensors of `like`'s shape and dtype.
void check_lists(const char* op, const std::vector<std::vector<tensor>>& lists, const char* kind,
                 const char* other, size_t n, size_t per_list, const tensor& like) {
  ACTORCH_CHECK(lists.size() == n, op, ": expected one ", kind, " list per ", other, " tensor (", n,
                ") but got ", lists.size());
  for (const auto& list : lists) {
    ACTORCH_CHECK(list.size() == per_list, op, ": each ", kind, " list must hold world size times ",
                  "the number of ", other, "s (", per_list, ") tensors, but one holds ",
                  list.size());
    for (const tensor& t : list)
      ACTORCH_CHECK(t.defined() && t.sizes() == like.sizes() && t.dtype() == like.dtype(), op,
                    ": every ", kind, " tensor must have the ", other, "s' shape and dtype (",
                    dtype_name(like.dtype()), " of shape ", shape_str(like.sizes()), ")");
  }
}

// The op the processes' collective runs: the local sums of AVG are summed and divided later.
reduce_op across(const char* op, reduce_op r) {
  ACTORCH_CHECK(r != reduce_op::band && r != reduce_op::bor && r != reduce_op::bxor, op, ": ",
                reduce_op_name(r),
                " is not supported by actorch's *_multigpu collectives (SUM, "
                "AVG, PRODUCT, MIN and MAX are)");
  return r == reduce_op::avg ? reduce_op::sum : r;
}

tensor combine(reduce_op r, const tensor& a, const tensor& b) {
  switch (r) {
  case reduce_op::product: return a * b;
  case reduce_op::min: return minimum(a, b);
  case reduce_op::max: return maximum(a, b);
  default: return a + b; // sum, and avg's sum
  }
}

// The reduction of `ts` as a fresh tensor on `on`.
tensor reduce_local(reduce_op r, const std::vector<const tensor*>& ts, const device& on) {
  tensor acc = ts[0]->to(on, false, /*copy=*/true);
  for (size_t i = 1; i < ts.size(); ++i)
    acc = combine(r, acc, ts[i]->to(on));
  return acc;
}

std::vector<const tensor*> pointers(const std::vector<tensor>& ts) {
  std::vector<const tensor*> out;
  for (const tensor& t : ts)
    out.push_back(&t);
  return out;
}

// AVG's division: the sum over every tensor of every process.
tensor averaged(reduce_op r, const tensor& t, int64_t participants) {
  return r == reduce_op::avg ? t.div(double(participants)) : t;
}

// `copy_back` once `w` completed without error; waits unless async_op, as the collectives do.
work then_copy(const work& w, bool async_op, std::function<void()> copy_back) {
  work done = w.then([copy_back = std::move(copy_back)](const work& parent) {
    if (!parent.exception()) {
      no_grad guard;
      copy_back();
    }
  });
  if (!async_op)
    done.wait();
  return done;
}

group resolved(const group& g) {
  return g ? g : world();
}

// This process's global rank (src and dst are global).
int global_rank(const group& pg) {
  return pg->global_ranks()[size_t(pg->rank())];
}

} // namespace

work all_reduce_multigpu(std::vector<tensor>& tensor_list, reduce_op op, const group& g,
                         bool async_op) {
  const char* name = "all_reduce_multigpu";
  check_list(name, tensor_list);
  const group pg = resolved(g);
  const reduce_op r = across(name, op);
  tensor acc = reduce_local(r, pointers(tensor_list), pg->collective_device());
  const int64_t participants = int64_t(pg->size()) * int64_t(tensor_list.size());
  return then_copy(all_reduce(acc, r, pg, true), async_op, [acc, op, participants, tensor_list] {
    const tensor result = averaged(op, acc, participants);
    for (const tensor& t : tensor_list)
      tensor(t).copy_(result);
  });
}

work broadcast_multigpu(std::vector<tensor>& tensor_list, int src, const group& g, bool async_op,
                        int src_tensor) {
  const char* name = "broadcast_multigpu";
  check_list(name, tensor_list);
  ACTORCH_CHECK(src_tensor >= 0 && size_t(src_tensor) < tensor_list.size(), name, ": src_tensor ",
                src_tensor, " is out of range for a list of ", tensor_list.size(), " tensors");
  const group pg = resolved(g);
  const device on = pg->collective_device();
  tensor buf = global_rank(pg) == src ? tensor_list[size_t(src_tensor)].to(on, false, true)
                                      : empty_like(tensor_list[0], {.device = on});
  return then_copy(broadcast(buf, src, pg, true), async_op, [buf, tensor_list] {
    for (const tensor& t : tensor_list)
      tensor(t).copy_(buf);
  });
}

work reduce_multigpu(std::vector<tensor>& tensor_list, int dst, reduce_op op, const group& g,
                     bool async_op, int dst_tensor) {
  const char* name = "reduce_multigpu";
  check_list(name, tensor_list);
  ACTORCH_CHECK(dst_tensor >= 0 && size_t(dst_tensor) < tensor_list.size(), name, ": dst_tensor ",
                dst_tensor, " is out of range for a list of ", tensor_list.size(), " tensors");
  const group pg = resolved(g);
  const reduce_op r = across(name, op);
  tensor acc = reduce_local(r, pointers(tensor_list), pg->collective_device());
  const int64_t participants = int64_t(pg->size()) * int64_t(tensor_list.size());
  const bool receives = global_rank(pg) == dst;
  tensor out = tensor_list[size_t(dst_tensor)];
  return then_copy(reduce(acc, dst, r, pg, true), async_op,
                   [acc, op, participants, receives, out]() mutable {
                     if (receives)
                       out.copy_(averaged(op, acc, participants));
                   });
}

work all_gather_multigpu(std::vector<std::vector<tensor>>& output_tensor_lists,
                         const std::vector<tensor>& input_tensor_list, const group& g,
                         bool async_op) {
  const char* name = "all_gather_multigpu";
  check_list(name, input_tensor_list, "input_tensor_list");
  const group pg = resolved(g);
  const size_t n = input_tensor_list.size(), world_n = size_t(pg->size()) * n;
  check_lists(name, output_tensor_lists, "output", "input", n, world_n, input_tensor_list[0]);
  const device on = pg->collective_device();
  std::vector<tensor> moved;
  for (const tensor& t : input_tensor_list)
    moved.push_back(t.to(on));
  const tensor mine = stack(moved, 0);
  std::vector<tensor> gathered;
  for (int k = 0; k < pg->size(); ++k)
    gathered.push_back(empty_like(mine));
  return then_copy(all_gather(gathered, mine, pg, true), async_op,
                   [gathered, n, output_tensor_lists] {
                     for (const auto& outs : output_tensor_lists)
                       for (size_t k = 0; k < gathered.size(); ++k)
                         for (size_t j = 0; j < n; ++j)
                           tensor(outs[k * n + j]).copy_(gathered[k].select(0, int64_t(j)));
                   });
}

work reduce_scatter_multigpu(std::vector<tensor>& output_tensor_list,
                             const std::vector<std::vector<tensor>>& input_tensor_lists,
                             reduce_op op, const group& g, bool async_op) {
  const char* name = "reduce_scatter_multigpu";
  check_list(name, output_tensor_list, "output_tensor_list");
  const group pg = resolved(g);
  const size_t n = output_tensor_list.size(), world = size_t(pg->size());
  check_lists(name, input_tensor_lists, "input", "output", n, world * n, output_tensor_list[0]);
  const reduce_op r = across(name, op);
  const device on = pg->collective_device();
  // Position p's local reduction over the lists, then one (n, ...) chunk per process.
  std::vector<tensor> chunks;
  for (size_t k = 0; k < world; ++k) {
    std::vector<tensor> rows;
    for (size_t j = 0; j < n; ++j) {
      std::vector<const tensor*> at;
      for (const auto& ins : input_tensor_lists)
        at.push_back(&ins[k * n + j]);
      rows.push_back(reduce_local(r, at, on));
    }
    chunks.push_back(stack(rows, 0));
  }
  tensor out = empty_like(chunks[0]);
  const int64_t participants = int64_t(world * n);
  return then_copy(reduce_scatter(out, chunks, r, pg, true), async_op,
                   [out, op, participants, output_tensor_list, n] {
                     const tensor result = averaged(op, out, participants);
                     for (size_t j = 0; j < n; ++j)
                       tensor(output_tensor_list[j]).copy_(result.select(0, int64_t(j)));
                   });
}

} // namespace actorch::dist
