// all_to_all of the Gloo group, sizes checked pairwise across ranks before Gloo moves data. See
// Note [Gloo group threads] in process_group_gloo.cpp.
#include <gloo/allgather.h>
#include <gloo/alltoallv.h>

#include "comm/backend/gloo/process_group_gloo_impl.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::dist {

namespace {

// The start of `ts` when they lie back to back in one piece of memory, each contiguous (the
// chunks of one tensor, as all_to_all_single's): Gloo then reads or writes them in place, with
// no copy into or out of a flat buffer. Null otherwise.
char* back_to_back(const std::vector<tensor>& ts) {
  char* next = nullptr;
  for (const tensor& t : ts) {
    if (!t.is_contiguous())
      return nullptr;
    auto* p = static_cast<char*>(t.data_ptr());
    if (next != nullptr && p != next && t.numel() > 0)
      return nullptr;
    next = p + t.nbytes();
  }
  return ts.empty() ? nullptr : static_cast<char*>(ts.front().data_ptr());
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* p = static_cast<const char*>(a);
  const auto* q = static_cast<const char*>(b);
  return a_bytes != 0 && b_bytes != 0 && p < q + b_bytes && q < p + a_bytes;
}

size_t total_bytes(const std::vector<tensor>& ts) {
  size_t bytes = 0;
  for (const tensor& t : ts)
    bytes += size_t(t.nbytes());
  return bytes;
}

// all_to_all's header carries the dtype only; the counts are checked pairwise.
op_header all_to_all_header(dtype dt) {
  const tensor dtype_only = empty({0}, {.dtype = dt});
  return make_header(op_kind::all_to_all, &dtype_only, -1, -1);
}

} // namespace

work process_group_gloo::all_to_all(std::vector<tensor>& outputs,
                                    const std::vector<tensor>& inputs) {
  // Sizes may differ per pair (torch's all_to_all): rank r's inputs[j] must match rank j's
  // outputs[r], which the ranks check together before Gloo moves any data (a recv smaller
  // than its send would abort the process inside Gloo).
  const size_t n = size_t(size());
  ACTORCH_CHECK(inputs.size() == n && outputs.size() == n, "all_to_all: inputs and outputs must ",
                "hold ", n, " tensors (one per rank) but hold ", inputs.size(), " and ",
                outputs.size());
  // counts[j]: elements sent to rank j; counts[n + j]: elements expected from rank j.
  std::vector<int64_t> counts(2 * n);
  for (size_t j = 0; j < n; ++j) {
    check_cpu("all_to_all", inputs[j], "an input");
    check_cpu("all_to_all", outputs[j], "an output");
    ACTORCH_CHECK(inputs[j].dtype() == inputs[0].dtype() && outputs[j].dtype() == inputs[0].dtype(),
                  "all_to_all: every tensor must have dtype ", dtype_name(inputs[0].dtype()),
                  " but inputs[", j, "] is ", dtype_name(inputs[j].dtype()), " and outputs[", j,
                  "] is ", dtype_name(outputs[j].dtype()));
    counts[j] = inputs[j].numel();
    counts[n + j] = outputs[j].numel();
  }
  auto ins = inputs;
  auto outs = outputs;
  const dtype dt = inputs[0].dtype();
  if (impl_->shm)
    return impl_->enqueue("all_to_all", [this, ins, outs, n, counts, dt](uint32_t seq) {
      const std::vector<int64_t> all = impl_->all_to_all_counts(counts, dt, seq);
      impl_->check_pairs(all, n);
      impl_->shm_all_to_all(ins, outs, all, dt);
      return outs;
    });
  // In place where the chunks lie back to back (as all_to_all_single's do), else through flat
  // buffers. The inputs are read when the op runs: a caller leaves them alone until it is done.
  char* in_place = back_to_back(inputs);
  char* const out_place = back_to_back(outputs);
  if (in_place && out_place &&
      overlap(in_place, total_bytes(inputs), out_place, total_bytes(outputs)))
    in_place = nullptr; // outputs over the inputs: Gloo would read what it wrote
  tensor in;
  if (in_place == nullptr) {
    std::vector<tensor> flat_inputs;
    for (const auto& t : inputs)
      flat_inputs.push_back(t.reshape({-1}));
    in = cat(flat_inputs, 0);
  }
  return impl_->enqueue("all_to_all", [this, in, ins, in_place, out_place, outs, n, counts,
                                       dt](uint32_t seq) {
    const std::vector<int64_t> all = impl_->all_to_all_counts(counts, dt, seq);
    impl_->check_pairs(all, n);
    const size_t es = element_size(dt);
    std::vector<int64_t> send_bytes, recv_bytes;
    int64_t total = 0;
    for (size_t j = 0; j < n; ++j) {
      send_bytes.push_back(counts[j] * int64_t(es));
      recv_bytes.push_back(counts[n + j] * int64_t(es));
      total += counts[n + j];
    }
    tensor flat = out_place ? tensor() : empty({total}, {.dtype = dt});
    gloo::AlltoallvOptions o(impl_->ctx(seq));
    o.setInput(reinterpret_cast<uint8_t*>(in_place ? in_place : static_cast<char*>(in.data_ptr())),
               send_bytes);
    o.setOutput(
        reinterpret_cast<uint8_t*>(out_place ? out_place : static_cast<char*>(flat.data_ptr())),
        recv_bytes);
    impl_->tag(o, seq);
    gloo::alltoallv(o);
    if (!out_place) {
      int64_t at = 0;
      for (size_t j = 0; j < n; ++j) {
        tensor dst = outs[j];
        dst.copy_(flat.narrow(0, at, counts[n + j]).view(dst.sizes()));
        at += counts[n + j];
      }
    }
    (void)ins; // kept alive until the op has read them
    return outs;
  });
}

std::vector<int64_t> process_group_gloo::impl::all_to_all_counts(const std::vector<int64_t>& counts,
                                                                 dtype dt, uint32_t seq) {
  const op_header h = all_to_all_header(dt);
  const size_t n = size_t(pg.size());
  std::vector<int64_t> all(counts.size() * n);
  if (shm) {
    std::vector<char*> outs;
    for (size_t q = 0; q < n; ++q)
      outs.push_back(reinterpret_cast<char*>(all.data() + q * counts.size()));
    staged("all_to_all", [&](std::vector<int64_t>& headers) {
      return shm->all_gather(h.v, headers, reinterpret_cast<const char*>(counts.data()),
                             counts.size() * sizeof(int64_t), outs);
    });
    return all;
  }
  check_headers("all_to_all", seq, h);
  gloo::AllgatherOptions ag(ctx(seq));
  ag.setInput(const_cast<int64_t*>(counts.data()), counts.size());
  ag.setOutput(all.data(), all.size());
  ag.setTag(4 * seq + 2);
  ag.setTimeout(opts.timeout);
  gloo::allgather(ag);
  return all;
}

void process_group_gloo::impl::check_pairs(const std::vector<int64_t>& all, size_t n) const {
  std::string bad;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (all[i * 2 * n + j] != all[j * 2 * n + n + i])
        bad += std::string(bad.empty() ? "" : "; ") + "rank " +
               std::to_string(pg.global_ranks()[i]) + " sends " +
               std::to_string(all[i * 2 * n + j]) + " elements to rank " +
               std::to_string(pg.global_ranks()[j]) + ", which expects " +
               std::to_string(all[j * 2 * n + n + i]);
  ACTORCH_CHECK(bad.empty(), "all_to_all: sizes do not match across ranks: ", bad);
}

void process_group_gloo::impl::shm_all_to_all(const std::vector<tensor>& inputs,
                                              const std::vector<tensor>& outputs,
                                              const std::vector<int64_t>& all, dtype dt) {
  const size_t n = size_t(pg.size()), es = element_size(dt);
  staged_outputs dst(outputs);
  std::vector<tensor> ins;
  std::vector<const char*> sends;
  std::vector<size_t> send_bytes, recv_bytes;
  for (size_t j = 0; j < n; ++j) {
    // An input under an output the op writes would be overwritten before it is staged.
    tensor t = inputs[j].contiguous();
    const auto under_an_output = [&] {
      for (size_t i = 0; i < n; ++i)
        if (overlap(t.data_ptr(), t.nbytes(), dst.ptrs[i], dst.bufs[i].flat.nbytes()))
          return true;
      return false;
    };
    if (t.is_same(inputs[j]) && under_an_output())
      t = t.clone();
    sends.push_back(static_cast<const char*>(t.data_ptr()));
    send_bytes.push_back(size_t(t.nbytes()));
    recv_bytes.push_back(size_t(dst.bufs[j].flat.nbytes()));
    ins.push_back(std::move(t));
  }
  size_t max_pair = 0;
  for (int64_t c : all)
    max_pair = std::max(max_pair, size_t(c) * es);
  const op_header h = all_to_all_header(dt);
  staged("all_to_all", [&](std::vector<int64_t>& headers) {
    return shm->all_to_all(h.v, headers, sends, send_bytes, dst.ptrs, recv_bytes, max_pair);
  });
  dst.copy_back();
}

} // namespace actorch::dist
