// The gathers of the Gloo group: all_gather, all_gather_into_tensor and gather. See Note [Gloo
// group threads] in process_group_gloo.cpp.
#include <gloo/allgather.h>
#include <gloo/gather.h>

#include "comm/backend/gloo/process_group_gloo_impl.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

work process_group_gloo::all_gather_into_tensor(tensor& output, const tensor& input) {
  check_cpu("all_gather_into_tensor", output, "the output");
  check_cpu("all_gather_into_tensor", input, "the input");
  ACTORCH_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * size(),
                "all_gather_into_tensor: the output must hold ", size(), " x ", input.numel(),
                " elements of ", dtype_name(input.dtype()), " but is ", dtype_name(output.dtype()),
                " ", shape_str(output.sizes()));
  auto in = std::make_shared<contiguous_buffer>(input);
  auto out = std::make_shared<contiguous_buffer>(output);
  return impl_->enqueue("all_gather_into_tensor", [this, in, out](uint32_t seq) {
    const op_header h = make_header(op_kind::all_gather, &in->flat, -1, -1);
    if (impl_->shm) {
      const size_t bytes = in->flat.nbytes();
      std::vector<char*> outs;
      for (int q = 0; q < size(); ++q)
        outs.push_back(static_cast<char*>(out->flat.data_ptr()) + size_t(q) * bytes);
      impl_->staged("all_gather_into_tensor", [&](std::vector<int64_t>& all) {
        return impl_->shm->all_gather(h.v, all, static_cast<const char*>(in->flat.data_ptr()),
                                      bytes, outs);
      });
      out->copy_back();
      return std::vector<tensor>{out->orig};
    }
    impl_->check_headers("all_gather_into_tensor", seq, h);
    gloo::AllgatherOptions o(impl_->ctx(seq));
    o.setInput(static_cast<uint8_t*>(in->flat.data_ptr()), in->flat.nbytes());
    o.setOutput(static_cast<uint8_t*>(out->flat.data_ptr()), out->flat.nbytes());
    impl_->tag(o, seq);
    gloo::allgather(o);
    out->copy_back();
    return std::vector<tensor>{out->orig};
  });
}

work process_group_gloo::all_gather(std::vector<tensor>& outputs, const tensor& input) {
  check_cpu("all_gather", input, "the input");
  check_list("all_gather", outputs, "outputs", size_t(size()), input);
  auto in = std::make_shared<contiguous_buffer>(input);
  auto outs = outputs;
  return impl_->enqueue("all_gather", [this, in, outs](uint32_t seq) {
    const op_header h = make_header(op_kind::all_gather, &in->flat, -1, -1);
    if (impl_->shm) {
      staged_outputs dst(outs);
      impl_->staged("all_gather", [&](std::vector<int64_t>& all) {
        return impl_->shm->all_gather(h.v, all, static_cast<const char*>(in->flat.data_ptr()),
                                      in->flat.nbytes(), dst.ptrs);
      });
      dst.copy_back();
      return outs;
    }
    impl_->check_headers("all_gather", seq, h);
    tensor flat = empty({int64_t(size()) * in->flat.numel()}, {.dtype = in->flat.dtype()});
    gloo::AllgatherOptions o(impl_->ctx(seq));
    o.setInput(static_cast<uint8_t*>(in->flat.data_ptr()), in->flat.nbytes());
    o.setOutput(static_cast<uint8_t*>(flat.data_ptr()), flat.nbytes());
    impl_->tag(o, seq);
    gloo::allgather(o);
    const int64_t n = in->flat.numel();
    for (size_t r = 0; r < outs.size(); ++r) {
      tensor dst = outs[r];
      dst.copy_(flat.narrow(0, int64_t(r) * n, n).view(dst.sizes()));
    }
    return outs;
  });
}

work process_group_gloo::gather(std::vector<tensor>& outputs, const tensor& input, int root) {
  check_cpu("gather", input, "the input");
  check_rank("gather", root, "root");
  if (rank() == root)
    check_list("gather", outputs, "outputs on the root", size_t(size()), input);
  else
    ACTORCH_CHECK(outputs.empty(), "gather: outputs must be empty on ranks other than the root (",
                  root, ") but holds ", outputs.size(), " tensors on rank ", rank());
  auto in = std::make_shared<contiguous_buffer>(input);
  auto outs = outputs;
  return impl_->enqueue("gather", [this, in, outs, root](uint32_t seq) {
    const op_header h = make_header(op_kind::gather, &in->flat, root, -1);
    if (impl_->shm) {
      staged_outputs dst(outs); // empty off the root
      impl_->staged("gather", [&](std::vector<int64_t>& all) {
        return impl_->shm->gather(h.v, all, root, static_cast<const char*>(in->flat.data_ptr()),
                                  in->flat.nbytes(), dst.ptrs);
      });
      dst.copy_back();
      return outs;
    }
    impl_->check_headers("gather", seq, h);
    gloo::GatherOptions o(impl_->ctx(seq));
    o.setInput(static_cast<uint8_t*>(in->flat.data_ptr()), in->flat.nbytes());
    tensor flat;
    if (rank() == root) {
      flat = empty({int64_t(size()) * in->flat.numel()}, {.dtype = in->flat.dtype()});
      o.setOutput(static_cast<uint8_t*>(flat.data_ptr()), flat.nbytes());
    }
    o.setRoot(root);
    impl_->tag(o, seq);
    gloo::gather(o);
    const int64_t n = in->flat.numel();
    for (size_t r = 0; r < outs.size(); ++r) {
      tensor dst = outs[r];
      dst.copy_(flat.narrow(0, int64_t(r) * n, n).view(dst.sizes()));
    }
    return outs;
  });
}

} // namespace actorch::dist
