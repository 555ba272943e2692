// The reductions of the Gloo group: all_reduce, reduce and reduce_scatter, through shared memory
// when every rank is on this host. See Note [Gloo group threads] in process_group_gloo.cpp.
#include <gloo/allreduce.h>
#include <gloo/reduce.h>

#include <algorithm>

#include "comm/backend/gloo/process_group_gloo_impl.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::dist {

namespace {

template <class T> void divide(void* data, size_t count, int64_t divisor) {
  T* p = static_cast<T*>(data);
  const T d = T(divisor);
  for (size_t i = 0; i < count; ++i)
    p[i] /= d;
}

// What the shared-memory all-reduce applies to each reduced share: AVG's division, for the
// dtypes it has one for; null otherwise (the caller divides the whole result afterwards when
// op is AVG). The same arithmetic as local_replicas' AVG, so that threads and processes give
// the same bits.
shm_collectives::finish_fn finish_of(reduce_op op, dtype dt) {
  if (op != reduce_op::avg)
    return nullptr;
  switch (dt) {
  case dtype::float32: return divide<float>;
  case dtype::float64: return divide<double>;
  default: return nullptr;
  }
}

// AVG's division of a shared-memory result that finish_of had no division for (left a sum).
void divide_unfinished(tensor& t, reduce_op op, shm_collectives::finish_fn finish, int size) {
  if (op == reduce_op::avg && finish == nullptr)
    t.div_(double(size));
}

// Note [Shared and private operands]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An all-reduce runs in place over shared blocks only when every rank passes its handle of the
// same block; the header's last slot says which block a rank passes (0: private memory). Ranks
// may differ there with nothing wrong: torch's Join has a rank that ran out of inputs all-reduce
// zeros of its own (private) in place of each DDP bucket, which on the others is a shared block
// (Note [DDP's buckets in shared memory] in python/src/torch_backend.cpp). So when the headers
// differ in that slot alone, every rank (each sees all headers) runs the op again through the
// segment's slots, where any memory will do: a mismatch leaves every operand untouched (Note
// [Header mismatches]), so the second attempt starts clean.
bool differ_in_shared_slot_only(const std::vector<int64_t>& all) {
  const size_t ranks = all.size() / kHeaderLen;
  for (size_t q = 1; q < ranks; ++q)
    for (size_t i = 0; i < kSharedSlot; ++i)
      if (all[q * kHeaderLen + i] != all[i])
        return false;
  return true;
}

} // namespace

std::shared_ptr<shm_collectives::shared_block>
process_group_gloo::impl::shared_block_of(const tensor& flat) {
  std::lock_guard lock(shared_mu);
  auto it = shared.find(flat.data_ptr());
  if (it == shared.end())
    return nullptr;
  auto block = it->second.lock();
  if (!block) {
    shared.erase(it);
    return nullptr;
  }
  return size_t(flat.nbytes()) == block->bytes ? block : nullptr;
}

tensor process_group_gloo::empty_shared(int64_t numel, dtype dt) {
  ACTORCH_CHECK(numel >= 0, "empty_shared: numel must not be negative but got ", numel);
  const size_t bytes = size_t(numel) * element_size(dt);
  // Every rank decides alike: the segment exists on all ranks or on none, and sizes agree.
  if (!impl_->shm || bytes <= shm_collectives::small_bytes())
    return {};
  auto block = impl_->shm->allocate(*impl_->st, bytes);
  if (!block)
    return {};
  char* mine = block->base[size_t(rank())];
  {
    std::lock_guard lock(impl_->shared_mu);
    std::erase_if(impl_->shared, [](const auto& kv) { return kv.second.expired(); });
    impl_->shared[mine] = block;
  }
  return from_blob(mine, {numel}, dt, [block](void*) mutable { block.reset(); });
}

size_t process_group_gloo::shared_blocks() const {
  std::lock_guard lock(impl_->shared_mu);
  return size_t(std::count_if(impl_->shared.begin(), impl_->shared.end(),
                              [](const auto& kv) { return !kv.second.expired(); }));
}

namespace {

class gloo_symmetric_memory final : public symmetric_memory {
public:
  gloo_symmetric_memory(std::shared_ptr<shm_collectives::shared_block> block, int64_t numel,
                        dtype dt)
      : block_(std::move(block)), numel_(numel), dt_(dt) {}
  tensor buffer(int q) const override {
    ACTORCH_CHECK(q >= 0 && q < int(block_->base.size()), "symmetric_memory: rank ", q,
                  " of a group of ", block_->base.size());
    auto keep = block_;
    return from_blob(block_->base[size_t(q)], {numel_}, dt_,
                     [keep](void*) mutable { keep.reset(); });
  }
  void barrier() override { block_->barrier(); }

private:
  std::shared_ptr<shm_collectives::shared_block> block_;
  int64_t numel_;
  dtype dt_;
};

} // namespace

std::shared_ptr<symmetric_memory> process_group_gloo::empty_symmetric(int64_t numel, dtype dt) {
  ACTORCH_CHECK(numel > 0, "empty_symmetric: numel must be positive but got ", numel);
  if (!impl_->shm)
    return nullptr;
  auto block = impl_->shm->allocate(*impl_->st, size_t(numel) * element_size(dt));
  if (!block)
    return nullptr;
  return std::make_shared<gloo_symmetric_memory>(std::move(block), numel, dt);
}

void process_group_gloo::impl::allreduce_checked(tensor& flat, reduce_op op, uint32_t seq) {
  op_header h = make_header(op_kind::all_reduce, &flat, -1, int(op));
  if (!shm) {
    check_headers("all_reduce", seq, h);
    allreduce_flat(flat, op, seq);
    return;
  }
  std::vector<int64_t> all;
  const shm_collectives::finish_fn finish = finish_of(op, flat.dtype());
  auto block = shared_block_of(flat);
  if (block)
    h.v[kSharedSlot] = int64_t(block->id) + 1;
  const auto attempt = [&] {
    return dispatch(flat.dtype(), [&]<class T>() {
      if (block)
        return shm->run_shared(*block, size_t(flat.numel()), sizeof(T),
                               reduce_function(op, dtype_of<T>()), h.v, all, finish, pg.size());
      return shm->run(flat.data_ptr(), size_t(flat.numel()), sizeof(T),
                      reduce_function(op, dtype_of<T>()), h.v, all, finish, pg.size());
    });
  };
  bool same = attempt();
  if (!same && differ_in_shared_slot_only(all)) { // Note [Shared and private operands]
    block = nullptr;
    h.v[kSharedSlot] = 0;
    same = attempt();
  }
  if (!same)
    throw_mismatch("all_reduce", all);
  divide_unfinished(flat, op, finish, pg.size());
}

void process_group_gloo::impl::allreduce_flat(tensor& flat, reduce_op op, uint32_t seq) {
  dispatch(flat.dtype(), [&]<class T>() {
    gloo::AllreduceOptions o(ctx(seq));
    o.setOutput(flat.data_ptr<T>(), size_t(flat.numel()));
    o.setReduceFunction(reduce_function(op, dtype_of<T>()));
    tag(o, seq);
    gloo::allreduce(o);
  });
  if (op == reduce_op::avg)
    flat.div_(double(pg.size()));
}
work process_group_gloo::all_reduce(tensor& t, reduce_op op) {
  check_cpu("all_reduce", t, "the tensor");
  check_reduce("all_reduce", t.dtype(), op);
  auto buf = std::make_shared<contiguous_buffer>(t);
  return impl_->enqueue("all_reduce", [this, buf, op](uint32_t seq) {
    impl_->allreduce_checked(buf->flat, op, seq);
    buf->copy_back();
    return std::vector<tensor>{buf->orig};
  });
}

work process_group_gloo::reduce(tensor& t, int root, reduce_op op) {
  check_cpu("reduce", t, "the tensor");
  check_rank("reduce", root, "root");
  check_reduce("reduce", t.dtype(), op);
  auto buf = std::make_shared<contiguous_buffer>(t);
  return impl_->enqueue("reduce", [this, buf, root, op](uint32_t seq) {
    const op_header h = make_header(op_kind::reduce, &buf->flat, root, int(op));
    if (impl_->shm) {
      const shm_collectives::finish_fn finish = finish_of(op, buf->flat.dtype());
      impl_->staged("reduce", [&](std::vector<int64_t>& all) {
        return dispatch(buf->flat.dtype(), [&]<class T>() {
          char* data = static_cast<char*>(buf->flat.data_ptr());
          return impl_->shm->reduce(h.v, all, root, data, data, size_t(buf->flat.numel()),
                                    sizeof(T), reduce_function(op, dtype_of<T>()), finish, size());
        });
      });
      if (rank() == root) {
        divide_unfinished(buf->flat, op, finish, size());
        buf->copy_back();
      }
      return std::vector<tensor>{buf->orig};
    }
    impl_->check_headers("reduce", seq, h);
    // Gloo reduces in place on every rank; non-roots reduce into a scratch copy so their
    // tensor keeps its value.
    tensor out = rank() == root ? buf->flat : buf->flat.clone();
    dispatch(out.dtype(), [&]<class T>() {
      gloo::ReduceOptions o(impl_->ctx(seq));
      o.setOutput(out.data_ptr<T>(), size_t(out.numel()));
      o.setRoot(root);
      o.setReduceFunction(reduce_function(op, dtype_of<T>()));
      impl_->tag(o, seq);
      gloo::reduce(o);
    });
    if (rank() == root) {
      if (op == reduce_op::avg)
        buf->flat.div_(double(size()));
      buf->copy_back();
    }
    return std::vector<tensor>{buf->orig};
  });
}

work process_group_gloo::reduce_scatter(tensor& output, const std::vector<tensor>& inputs,
                                        reduce_op op) {
  check_cpu("reduce_scatter", output, "the output");
  check_list("reduce_scatter", inputs, "inputs", size_t(size()), output);
  check_reduce("reduce_scatter", output.dtype(), op);
  auto out = std::make_shared<contiguous_buffer>(output);
  if (impl_->shm) { // each rank reduces its part straight from the others' inputs
    std::vector<tensor> ins;
    for (const auto& t : inputs)
      ins.push_back(t.contiguous());
    return impl_->enqueue("reduce_scatter", [this, out, ins, op](uint32_t) {
      const op_header h = make_header(op_kind::reduce_scatter, &out->flat, -1, int(op));
      const shm_collectives::finish_fn finish = finish_of(op, out->flat.dtype());
      std::vector<const char*> from;
      for (const auto& t : ins)
        from.push_back(static_cast<const char*>(t.data_ptr()));
      impl_->staged("reduce_scatter", [&](std::vector<int64_t>& all) {
        return dispatch(out->flat.dtype(), [&]<class T>() {
          return impl_->shm->reduce_scatter(
              h.v, all, from, static_cast<char*>(out->flat.data_ptr()), size_t(out->flat.numel()),
              sizeof(T), reduce_function(op, dtype_of<T>()), finish, size());
        });
      });
      divide_unfinished(out->flat, op, finish, size());
      out->copy_back();
      return std::vector<tensor>{out->orig};
    });
  }
  // Over TCP: an all-reduce of the concatenated inputs, keeping this rank's part; twice the
  // traffic of a dedicated reduce-scatter, which this Gloo lacks in its options API.
  std::vector<tensor> flat_inputs;
  for (const auto& t : inputs)
    flat_inputs.push_back(t.reshape({-1}));
  tensor all = cat(flat_inputs, 0);
  return impl_->enqueue("reduce_scatter", [this, out, all, op](uint32_t seq) mutable {
    impl_->check_headers("reduce_scatter", seq,
                         make_header(op_kind::reduce_scatter, &out->flat, -1, int(op)));
    impl_->allreduce_flat(all, op, seq);
    const int64_t n = out->flat.numel();
    out->flat.copy_(all.narrow(0, int64_t(rank()) * n, n).view(out->flat.sizes()));
    out->copy_back();
    return std::vector<tensor>{out->orig};
  });
}

} // namespace actorch::dist
