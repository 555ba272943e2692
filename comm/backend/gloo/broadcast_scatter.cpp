// The one-to-all ops of the Gloo group: broadcast and scatter. See Note [Gloo group threads] in
// process_group_gloo.cpp.
#include <gloo/broadcast.h>
#include <gloo/scatter.h>

#include "comm/backend/gloo/process_group_gloo_impl.hpp"

namespace actorch::dist {

work process_group_gloo::broadcast(tensor& t, int root) {
  check_cpu("broadcast", t, "the tensor");
  check_rank("broadcast", root, "root");
  auto buf = std::make_shared<contiguous_buffer>(t);
  return impl_->enqueue("broadcast", [this, buf, root](uint32_t seq) {
    const op_header h = make_header(op_kind::broadcast, &buf->flat, root, -1);
    if (impl_->shm) {
      impl_->staged("broadcast", [&](std::vector<int64_t>& all) {
        return impl_->shm->broadcast(h.v, all, root, static_cast<char*>(buf->flat.data_ptr()),
                                     buf->flat.nbytes());
      });
      buf->copy_back();
      return std::vector<tensor>{buf->orig};
    }
    impl_->check_headers("broadcast", seq, h);
    gloo::BroadcastOptions o(impl_->ctx(seq));
    // In place: Gloo sends the root's output buffer. (Giving the root the same buffer as input
    // too makes Gloo memcpy it onto itself while its device thread sends it.)
    o.setOutput(static_cast<uint8_t*>(buf->flat.data_ptr()), buf->flat.nbytes());
    o.setRoot(root);
    impl_->tag(o, seq);
    gloo::broadcast(o);
    buf->copy_back();
    return std::vector<tensor>{buf->orig};
  });
}

work process_group_gloo::scatter(tensor& output, const std::vector<tensor>& inputs, int root) {
  check_cpu("scatter", output, "the output");
  check_rank("scatter", root, "root");
  if (rank() == root)
    check_list("scatter", inputs, "inputs on the root", size_t(size()), output);
  else
    ACTORCH_CHECK(inputs.empty(), "scatter: inputs must be empty on ranks other than the root (",
                  root, ") but holds ", inputs.size(), " tensors on rank ", rank());
  auto out = std::make_shared<contiguous_buffer>(output);
  std::vector<tensor> ins;
  for (const auto& t : inputs)
    ins.push_back(t.contiguous());
  return impl_->enqueue("scatter", [this, out, ins, root](uint32_t seq) {
    const op_header h = make_header(op_kind::scatter, &out->flat, root, -1);
    if (impl_->shm) {
      std::vector<const char*> from;
      for (const auto& t : ins)
        from.push_back(static_cast<const char*>(t.data_ptr()));
      impl_->staged("scatter", [&](std::vector<int64_t>& all) {
        return impl_->shm->scatter(h.v, all, root, from, static_cast<char*>(out->flat.data_ptr()),
                                   out->flat.nbytes());
      });
      out->copy_back();
      return std::vector<tensor>{out->orig};
    }
    impl_->check_headers("scatter", seq, h);
    gloo::ScatterOptions o(impl_->ctx(seq));
    std::vector<uint8_t*> ptrs;
    for (const auto& t : ins)
      ptrs.push_back(static_cast<uint8_t*>(t.data_ptr()));
    if (rank() == root)
      o.setInputs(ptrs, out->flat.nbytes());
    o.setOutput(static_cast<uint8_t*>(out->flat.data_ptr()), out->flat.nbytes());
    o.setRoot(root);
    impl_->tag(o, seq);
    gloo::scatter(o);
    out->copy_back();
    return std::vector<tensor>{out->orig};
  });
}

} // namespace actorch::dist
