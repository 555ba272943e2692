// Note [Ranks sharing a GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected", an invalid
// usage since NCCL 2.5), yet two ranks on one GPU is how a DDP program (SyncBatchNorm's
// included) is tried on a machine with one GPU, and torch's gloo backend takes CUDA tensors by
// copying them through host memory. actorch's torch backend does the same where it must: at a
// group's first CUDA op every rank publishes its GPU's UUID (ranks_share_a_gpu), and if two
// ranks share one, every rank's CUDA ops go to this group over the CPU group instead of NCCL.
// Per op: each input is copied to host memory on the issuing thread (a blocking copy on the
// device's current stream, so after the kernels that wrote it); each output gets host memory;
// the CPU group runs the op on those; and the continuation of its work, on that group's worker,
// copies the outputs back to the GPU and only then completes the work this group returned. Two
// copies across PCIe and Gloo's path per op: correct, and far slower than NCCL, which a group
// whose ranks each hold their own GPU keeps using.
#include "comm/backend/host_staged.hpp"

#include <set>
#include <string>

#include "base/error.hpp"
#include "core/cuda/stream.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

bool ranks_share_a_gpu(store& store, int rank, int size, int device) {
  store.set("gpu/" + std::to_string(rank), cuda::device_uuid(device));
  std::set<std::string> seen;
  for (int q = 0; q < size; ++q)
    if (!seen.insert(store.get("gpu/" + std::to_string(q))).second)
      return true;
  return false;
}

namespace {

class host_staged_group final : public process_group {
public:
  host_staged_group(std::shared_ptr<process_group> host, int device)
      : process_group(host->rank(), host->size(), host->global_ranks()), host_(std::move(host)),
        device_(device) {}

  std::string backend() const override { return host_->backend(); }
  device collective_device() const override { return {device_type::cuda, device_}; }

  work broadcast(tensor& t, int root) override {
    tensor h = to_host(t, "broadcast");
    return back(host_->broadcast(h, root), {{t, h}}, {t});
  }
  work all_reduce(tensor& t, reduce_op op) override {
    tensor h = to_host(t, "all_reduce");
    return back(host_->all_reduce(h, op), {{t, h}}, {t});
  }
  work reduce(tensor& t, int root, reduce_op op) override {
    tensor h = to_host(t, "reduce");
    std::vector<staged> out; // only the root's result changes (the others keep theirs)
    if (rank() == root)
      out.push_back({t, h});
    return back(host_->reduce(h, root, op), std::move(out), {t});
  }
  work all_gather(std::vector<tensor>& outputs, const tensor& input) override {
    tensor h = to_host(input, "all_gather");
    auto [outs, hosts] = for_outputs(outputs, "all_gather");
    return back(host_->all_gather(hosts, h), std::move(outs), outputs, {h});
  }
  work all_gather_into_tensor(tensor& output, const tensor& input) override {
    tensor h = to_host(input, "all_gather_into_tensor");
    tensor o = host_output(output, "all_gather_into_tensor");
    return back(host_->all_gather_into_tensor(o, h), {{output, o}}, {output}, {h});
  }
  work gather(std::vector<tensor>& outputs, const tensor& input, int root) override {
    tensor h = to_host(input, "gather");
    auto [outs, hosts] = for_outputs(outputs, "gather");
    return back(host_->gather(hosts, h, root), std::move(outs), outputs, {h});
  }
  work scatter(tensor& output, const std::vector<tensor>& inputs, int root) override {
    std::vector<tensor> hs = to_host(inputs, "scatter");
    tensor o = host_output(output, "scatter");
    return back(host_->scatter(o, hs, root), {{output, o}}, {output}, hs);
  }
  work reduce_scatter(tensor& output, const std::vector<tensor>& inputs, reduce_op op) override {
    std::vector<tensor> hs = to_host(inputs, "reduce_scatter");
    tensor o = host_output(output, "reduce_scatter");
    return back(host_->reduce_scatter(o, hs, op), {{output, o}}, {output}, hs);
  }
  work all_to_all(std::vector<tensor>& outputs, const std::vector<tensor>& inputs) override {
    std::vector<tensor> hs = to_host(inputs, "all_to_all");
    auto [outs, hosts] = for_outputs(outputs, "all_to_all");
    return back(host_->all_to_all(hosts, hs), std::move(outs), outputs, hs);
  }
  work barrier() override { return host_->barrier(); }
  work monitored_barrier(std::chrono::milliseconds timeout, bool wait_all_ranks) override {
    return host_->monitored_barrier(timeout, wait_all_ranks);
  }
  work send(const tensor& t, int dst, int tag) override {
    tensor h = to_host(t, "send");
    return back(host_->send(h, dst, tag), {}, {t}, {h});
  }
  work recv(tensor& t, int src, int tag) override {
    tensor h = host_output(t, "recv");
    return back(host_->recv(h, src, tag), {{t, h}}, {t});
  }
  void abort() override { host_->abort(); }

private:
  struct staged {
    tensor gpu, host;
  };

  void check(const tensor& t, const char* op) const {
    ACTORCH_CHECK(t.device() == collective_device(), op, ": this group's tensors are on ",
                  collective_device().str(),
                  " (its ranks share a GPU, so its ops go through host memory), got one on ",
                  t.device().str());
  }
  tensor to_host(const tensor& t, const char* op) const {
    check(t, op);
    return t.to(kCPU);
  }
  std::vector<tensor> to_host(const std::vector<tensor>& ts, const char* op) const {
    std::vector<tensor> out;
    for (const tensor& t : ts)
      out.push_back(to_host(t, op));
    return out;
  }
  tensor host_output(const tensor& t, const char* op) const {
    check(t, op);
    return empty(t.sizes(), {.dtype = t.dtype()});
  }
  std::pair<std::vector<staged>, std::vector<tensor>> for_outputs(const std::vector<tensor>& ts,
                                                                  const char* op) const {
    std::vector<staged> outs;
    std::vector<tensor> hosts;
    for (const tensor& t : ts) {
      hosts.push_back(host_output(t, op));
      outs.push_back({t, hosts.back()});
    }
    return {std::move(outs), std::move(hosts)};
  }

  /// The work that completes once `w` has and `outs` are copied back to the GPU, with `result`;
  /// `inputs` (host copies) live until then.
  static work back(const work& w, std::vector<staged> outs, std::vector<tensor> result,
                   std::vector<tensor> inputs = {}) {
    work done;
    w.then([done, outs = std::move(outs), result = std::move(result),
            inputs = std::move(inputs)](const work& host_op) mutable {
      if (auto e = host_op.exception()) {
        done.mark_failed(e);
        return;
      }
      try {
        for (staged& s : outs)
          s.gpu.copy_(s.host);
      } catch (...) {
        done.mark_failed(std::current_exception());
        return;
      }
      inputs.clear();
      done.mark_completed(std::move(result), host_op.source_rank());
    });
    return done;
  }

  std::shared_ptr<process_group> host_;
  int device_;
};

} // namespace

std::shared_ptr<process_group> make_host_staged_group(std::shared_ptr<process_group> host,
                                                      int device) {
  ACTORCH_CHECK(host != nullptr && host->collective_device().is_cpu(),
                "make_host_staged_group: the group that runs the ops must be a CPU group");
  return std::make_shared<host_staged_group>(std::move(host), device);
}

} // namespace actorch::dist
