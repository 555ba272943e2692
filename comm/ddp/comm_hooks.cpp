// torch's built-in communication hooks over a bucket's replica group. The compression hooks
// return the all-reduce of the compressed copy at once (the reducer copies the result into the
// bucket, decompressing it); PowerSGD's three exchanges run in order inside the hook (see Note
// [PowerSGD's exchanges]).
#include "comm/ddp/comm_hooks.hpp"

#include <cmath>

#include "base/error.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/linalg.hpp"
#include "core/ops/reduce.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::dist::hooks {

namespace {

// The buffer divided by the world size and summed, in `as`: in place where that is the
// buffer's dtype, else in a compressed copy that the reducer copies back (decompressing).
comm_hook compress_hook(dtype as) {
  return [as](grad_bucket& b) {
    no_grad guard;
    tensor compressed = b.buffer().dtype() == as ? b.buffer() : b.buffer().to(as);
    compressed.div_(double(b.group().size()));
    return b.group().all_reduce(compressed, reduce_op::sum);
  };
}

} // namespace

comm_hook allreduce_hook() {
  return [](grad_bucket& b) {
    no_grad guard;
    tensor buffer = b.buffer();
    buffer.div_(double(b.group().size()));
    return b.group().all_reduce(buffer, reduce_op::sum);
  };
}

comm_hook fp16_compress_hook() {
  return compress_hook(dtype::float16);
}

comm_hook bf16_compress_hook() {
  return compress_hook(dtype::bfloat16);
}

void orthogonalize(tensor& m, double epsilon) {
  no_grad guard;
  const int64_t cols = m.size(1);
  for (int64_t i = 0; i < cols; ++i) {
    tensor col = m.narrow(1, i, 1);
    const tensor norm = col.mul(col).sum(shape_t{0}, true).sqrt();
    col.div_(epsilon == 0 ? norm : norm.add(epsilon));
    if (i + 1 < cols) {
      tensor rest = m.narrow(1, i + 1, cols - i - 1);
      rest.sub_(col.mul(rest).sum(shape_t{0}, true).mul(col));
    }
  }
}

powersgd_state::powersgd_state(powersgd_options o) : opts(o), rng(o.random_seed) {
  ACTORCH_CHECK(opts.matrix_approximation_rank >= 1,
                "PowerSGD: matrix_approximation_rank must be at least 1, got ",
                opts.matrix_approximation_rank);
  ACTORCH_CHECK(!(opts.use_error_feedback || opts.warm_start) || opts.start_powersgd_iter > 1,
                "PowerSGD: expect `start_powerSGD_iter` > 1 if `use_error_feedback` or "
                "`warm_start` is enabled, because PowerSGD can only be applied after the first "
                "two iterations in DDP (got ",
                opts.start_powersgd_iter, ")");
}

// Note [PowerSGD's exchanges]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch chains the uncompressed all-reduce, P's and Q's through futures. Here the hook waits
// for each before issuing the next, on the backward thread: a collective issued from a
// completion callback could pair with another bucket's on a replica that issued in the other
// order. The buckets after this one start their exchange once it returns; the compression is
// what PowerSGD is for, the overlap it loses is one bucket's latency per exchange.
comm_hook powersgd_hook(std::shared_ptr<powersgd_state> state) {
  ACTORCH_CHECK(state != nullptr, "powersgd_hook: the state is null");
  return [state](grad_bucket& b) -> work {
    no_grad guard;
    powersgd_state& s = *state;
    replica_group& group = b.group();
    const double world = group.size();
    tensor input = b.buffer();
    const auto next_iteration = [&] {
      if (b.is_last())
        ++s.iter;
    };
    if (s.iter < s.opts.start_powersgd_iter) { // vanilla all-reduce until then
      next_iteration();
      s.bytes_reduced += int64_t(input.nbytes());
      input.div_(world);
      return group.all_reduce(input, reduce_op::sum);
    }
    const size_t index = b.index();
    tensor input_copy;
    if (s.opts.use_error_feedback) {
      auto it = s.error_dict.find(index);
      if (it != s.error_dict.end())
        input.add_(it->second);
      else
        s.error_dict[index] = zeros_like(input);
      input_copy = input.clone();
    }
    // Which gradients pay for compression: (n + m) r min_compression_rate < n m.
    std::vector<tensor> compress, plain;
    std::vector<int64_t> ranks;
    for (const tensor& g : b.gradients()) {
      if (g.dim() == 0) {
        plain.push_back(g);
        continue;
      }
      const tensor matrix = g.view({g.size(0), -1});
      const int64_t n = matrix.size(0), m = matrix.size(1);
      const int64_t r = std::min({n, m, s.opts.matrix_approximation_rank});
      if (double((n + m) * r) * s.opts.min_compression_rate < double(n * m)) {
        compress.push_back(matrix);
        ranks.push_back(r);
      } else {
        plain.push_back(g);
      }
    }
    // The uncompressed ones, summed as one flat tensor.
    if (!plain.empty()) {
      std::vector<tensor> flat;
      for (const tensor& g : plain)
        flat.push_back(g.reshape({-1}));
      tensor joined = cat(flat, 0);
      s.bytes_reduced += int64_t(joined.nbytes());
      group.all_reduce(joined, reduce_op::sum).wait();
      joined.div_(world);
      int64_t at = 0;
      for (tensor g : plain) {
        g.copy_(joined.narrow(0, at, g.numel()).view(g.sizes()));
        at += g.numel();
      }
    }
    if (!compress.empty()) {
      int64_t p_total = 0, q_total = 0;
      for (size_t k = 0; k < compress.size(); ++k) {
        p_total += compress[k].size(0) * ranks[k];
        q_total += compress[k].size(1) * ranks[k];
      }
      // P and Q as views of one flat tensor each, so that each is one all-reduce; Q's memory
      // is kept per bucket for the warm start.
      auto q_it = s.q_memory.find(index);
      const bool fresh = !s.opts.warm_start || q_it == s.q_memory.end();
      tensor q_flat = fresh ? empty({q_total}, {.dtype = input.dtype()}) : q_it->second.front();
      tensor p_flat = empty({p_total}, {.dtype = input.dtype()});
      std::vector<tensor> ps, qs;
      int64_t p_at = 0, q_at = 0;
      for (size_t k = 0; k < compress.size(); ++k) {
        const int64_t n = compress[k].size(0), m = compress[k].size(1), r = ranks[k];
        ps.push_back(p_flat.narrow(0, p_at, n * r).view({n, r}));
        qs.push_back(q_flat.narrow(0, q_at, m * r).view({m, r}));
        p_at += n * r;
        q_at += m * r;
      }
      if (fresh) {
        // The same draws on every replica: the state's generator, seeded alike everywhere.
        for (tensor& q : qs)
          q.copy_(randn(q.sizes(), {.dtype = input.dtype()}, &s.rng));
      }
      for (tensor& q : qs)
        orthogonalize(q, s.opts.orthogonalization_epsilon);
      for (size_t k = 0; k < compress.size(); ++k)
        ps[k].copy_(matmul(compress[k], qs[k]));
      s.bytes_reduced += int64_t(p_flat.nbytes() + q_flat.nbytes());
      group.all_reduce(p_flat, reduce_op::sum).wait();
      for (tensor& p : ps)
        orthogonalize(p, s.opts.orthogonalization_epsilon);
      for (size_t k = 0; k < compress.size(); ++k)
        qs[k].copy_(matmul(compress[k].t(), ps[k]));
      group.all_reduce(q_flat, reduce_op::sum).wait();
      q_flat.div_(world);
      for (size_t k = 0; k < compress.size(); ++k)
        compress[k].copy_(matmul(ps[k], qs[k].t()));
      if (s.opts.warm_start)
        s.q_memory[index] = {q_flat};
    }
    if (s.opts.use_error_feedback)
      s.error_dict[index] = input_copy.sub(input);
    next_iteration();
    return work::completed({input});
  };
}

} // namespace actorch::dist::hooks
