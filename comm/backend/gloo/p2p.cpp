// send and recv of the Gloo group: posted on the caller's thread at once, their works completed
// in posting order by the p2p waiter. See Note [Gloo group threads] in process_group_gloo.cpp.
#include "comm/backend/gloo/process_group_gloo_impl.hpp"

namespace actorch::dist {

// What the p2p waiter holds of a posted send or recv until Gloo finishes it.
struct process_group_gloo::impl::p2p_op {
  std::string what; // "send to rank 1 (tag 3, float32 [4])"
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  std::shared_ptr<contiguous_buffer> data; // keeps the memory alive until done
  bool is_send = false;
  int peer = -1;
};

// Called with mu held, so the waiter sees the ops in the order they were posted to Gloo.
void process_group_gloo::impl::wait_p2p(std::shared_ptr<p2p_op> op, work w) {
  p2p_waiter.post([this, op = std::move(op), w, began = std::chrono::steady_clock::now()] {
    try {
      int src = -1;
      const bool ok =
          op->is_send ? op->buf->waitSend(opts.timeout) : op->buf->waitRecv(&src, opts.timeout);
      ACTORCH_CHECK(ok, op->what, " was aborted");
      if (!op->is_send)
        op->data->copy_back();
      w.mark_completed({}, op->is_send ? op->peer : src);
    } catch (const actorch::error&) {
      w.mark_failed(std::current_exception());
    } catch (const std::exception& e) {
      w.mark_failed(fail_group(op->what,
                               std::string(e.what()) +
                                   " (a send and its recv must agree on tag, dtype "
                                   "and number of elements; see Note "
                                   "[Point-to-point slots])",
                               began));
    }
  });
}

work process_group_gloo::send(const tensor& t, int dst, int tag) {
  check_cpu("send", t, "the tensor");
  check_rank("send", dst, "dst");
  ACTORCH_CHECK(dst != rank(), "send: rank ", rank(), " cannot send to itself");
  ACTORCH_CHECK(tag >= 0, "send: tag must be >= 0 but got ", tag);
  auto op = std::make_shared<impl::p2p_op>();
  op->data = std::make_shared<contiguous_buffer>(t);
  op->what = "send to rank " + std::to_string(global_ranks_[size_t(dst)]) + " " + p2p_what(t, tag);
  op->is_send = true;
  op->peer = dst;
  const uint64_t slot = p2p_slot(tag, op->data->flat); // See Note [Point-to-point slots]
  std::lock_guard lock(impl_->mu);
  if (!impl_->broken.empty())
    return work::failed(impl_->refused("send"));
  op->buf = impl_->ctx(uint32_t(tag))
                ->createUnboundBuffer(op->data->flat.data_ptr(), op->data->flat.nbytes());
  op->buf->send(dst, slot);
  work w;
  impl_->wait_p2p(std::move(op), w);
  return w;
}

work process_group_gloo::recv(tensor& t, int src, int tag) {
  check_cpu("recv", t, "the tensor");
  if (src != -1) {
    check_rank("recv", src, "src");
    ACTORCH_CHECK(src != rank(), "recv: rank ", rank(), " cannot receive from itself");
  }
  ACTORCH_CHECK(tag >= 0, "recv: tag must be >= 0 but got ", tag);
  ACTORCH_CHECK(size() > 1, "recv: a group of one rank has nobody to receive from");
  auto op = std::make_shared<impl::p2p_op>();
  op->data = std::make_shared<contiguous_buffer>(t);
  op->peer = src;
  const uint64_t slot = p2p_slot(tag, op->data->flat); // See Note [Point-to-point slots]
  std::lock_guard lock(impl_->mu);
  if (!impl_->broken.empty())
    return work::failed(impl_->refused("recv"));
  op->buf = impl_->ctx(uint32_t(tag))
                ->createUnboundBuffer(op->data->flat.data_ptr(), op->data->flat.nbytes());
  if (src == -1) {
    std::vector<int> srcs;
    for (int r = 0; r < size(); ++r)
      if (r != rank())
        srcs.push_back(r);
    op->buf->recv(srcs, slot);
    op->what = "recv from any rank " + p2p_what(t, tag);
  } else {
    op->buf->recv(src, slot);
    op->what =
        "recv from rank " + std::to_string(global_ranks_[size_t(src)]) + " " + p2p_what(t, tag);
  }
  work w;
  impl_->wait_p2p(std::move(op), w);
  return w;
}

} // namespace actorch::dist
