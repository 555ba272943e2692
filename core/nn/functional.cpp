// nn.functional, composed of differentiable core ops.
#include "core/nn/functional.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"
#include "core/core.hpp"
#include "core/tensor_iterator.hpp"

namespace actorch::nn::functional {

reduction parse_reduction(const std::string& s) {
  if (s == "none")
    return reduction::none;
  if (s == "mean")
    return reduction::mean;
  if (s == "sum")
    return reduction::sum;
  ACTORCH_FAIL("reduction: expected \"none\", \"mean\" or \"sum\" but got \"", s, "\"");
}

tensor linear(const tensor& input, const tensor& weight, const tensor& bias) {
  ACTORCH_CHECK(weight.dim() == 2,
                "linear: weight must be 2-D (out_features, in_features) but "
                "has shape ",
                shape_str(weight.sizes()));
  ACTORCH_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), "linear: input of shape ",
                shape_str(input.sizes()), " does not end in in_features = ", weight.size(1),
                " (weight shape ", shape_str(weight.sizes()), ")");
  if (input.dim() != 2) {
    tensor out = matmul(input, weight.t());
    return bias.defined() ? out + bias : out;
  }
  // 2-D input: one node whose backward produces each gradient in its parameter's own layout
  // (dW = g^T x is (out, in), contiguous), rather than addmm's gradient of W^T, which would
  // reach W as a transposed view and need a strided copy on every step.
  const bool track = autograd::needs_grad({&input, &weight, &bias});
  tensor out;
  {
    no_grad untracked;
    out = bias.defined() ? addmm(bias, input, weight.t()) : mm(input, weight.t());
  }
  if (track) {
    std::vector<const tensor*> inputs{&input, &weight};
    if (bias.defined())
      inputs.push_back(&bias);
    autograd::record(
        out, "LinearBackward0", inputs, {input, weight},
        [has_bias = bias.defined()](const auto& g, const auto& s) {
          // input (N, in), weight (out, in), g (N, out)
          using autograd::needs_input_grad;
          // dW straight into the weight's gradient destination where it has one
          // (Note [Gradient destinations]): DDP's bucket, the sharded step's block.
          tensor dw;
          if (needs_input_grad(1)) {
            const tensor dest = autograd::input_grad_destination(1);
            dw = dest.defined() ? mm_out(dest, g[0].t(), s[0]) : mm(g[0].t(), s[0]);
          }
          std::vector<tensor> grads{needs_input_grad(0) ? mm(g[0], s[1]) : tensor(), dw};
          if (has_bias)
            grads.push_back(needs_input_grad(2) ? g[0].sum(shape_t{0}) : tensor());
          return grads;
        });
  }
  return out;
}

tensor relu(const tensor& input) {
  return actorch::relu(input);
}

namespace {
// input * keep / (1 - p) when training, keep drawn once per element of mask_shape (which
// broadcasts to input's shape) as 1 with probability 1 - p.
tensor drop(const tensor& input, double p, bool training, const shape_t& mask_shape,
            generator* gen) {
  if (!training || p == 0)
    return input;
  if (p == 1)
    return input * 0.0;
  const tensor keep =
      rand(mask_shape, {.dtype = input.dtype(), .device = input.device()}, gen).ge(p);
  return input * keep.to(input.dtype()) * (1.0 / (1.0 - p));
}
} // namespace

tensor dropout(const tensor& input, double p, bool training, generator* gen) {
  ACTORCH_CHECK(p >= 0 && p <= 1, "dropout: probability has to be between 0 and 1, but got ", p);
  return drop(input, p, training, input.sizes(), gen);
}

tensor dropout2d(const tensor& input, double p, bool training, generator* gen) {
  ACTORCH_CHECK(p >= 0 && p <= 1, "dropout2d: probability has to be between 0 and 1, but got ", p);
  check_defined("dropout2d", {&input});
  ACTORCH_CHECK(input.dim() == 3 || input.dim() == 4,
                "dropout2d: expected a 3-D (N, C, L) or 4-D (N, C, H, W) input, but got shape ",
                shape_str(input.sizes()));
  shape_t mask_shape(size_t(input.dim()), 1);
  mask_shape[0] = input.size(0);
  mask_shape[1] = input.size(1);
  return drop(input, p, training, mask_shape, gen);
}

namespace {
/// The channels of an (N, C, *) input, the dims its statistics reduce (all but 1), and the
/// shape a per-channel vector broadcasts as ({1, C, 1, ...}).
struct channels {
  int64_t c;
  shape_t dims;
  shape_t bshape;
};
channels channel_layout(const tensor& input, const char* op) {
  check_defined(op, {&input});
  ACTORCH_CHECK(input.dim() >= 2, op,
                ": expected an input of at least 2 dims (N, C, *), but got shape ",
                shape_str(input.sizes()));
  channels out{input.size(1), {0}, shape_t(size_t(input.dim()), 1)};
  for (int64_t d = 2; d < input.dim(); ++d)
    out.dims.push_back(d);
  out.bshape[1] = out.c;
  return out;
}
} // namespace

tensor batch_norm(const tensor& input, tensor running_mean, tensor running_var,
                  const tensor& weight, const tensor& bias, bool training,
                  std::optional<double> momentum, double eps, tensor num_batches_tracked) {
  const auto [c, dims, bshape] = channel_layout(input, "batch_norm");
  tensor mean_, var_;
  if (training) {
    const int64_t n = input.numel() / c;
    ACTORCH_CHECK(n > 1,
                  "batch_norm: expected more than 1 value per channel when training, "
                  "got input of shape ",
                  shape_str(input.sizes()));
    mean_ = input.mean(dims, true);
    var_ = input.var(dims, false, true); // biased: what normalises the batch
    if (running_mean.defined()) {
      no_grad guard;
      if (num_batches_tracked.defined())
        num_batches_tracked.add_(1);
      // momentum unset (PyTorch's momentum=None): a cumulative moving average.
      ACTORCH_CHECK(momentum || num_batches_tracked.defined(),
                    "batch_norm: a cumulative average (momentum unset) needs num_batches_tracked");
      const double m = momentum ? *momentum : 1.0 / double(num_batches_tracked.item<int64_t>());
      running_mean.mul_(1 - m).add_(mean_.detach().view({c}), m);
      // The running variance uses the unbiased batch variance, as PyTorch does.
      running_var.mul_(1 - m).add_(var_.detach().view({c}) * (double(n) / double(n - 1)), m);
    }
  } else {
    ACTORCH_CHECK(running_mean.defined(), "batch_norm: evaluation without running stats needs "
                                          "track_running_stats=false to use batch statistics");
    mean_ = running_mean.view(bshape);
    var_ = running_var.view(bshape);
  }
  tensor out = (input - mean_) / (var_ + eps).sqrt();
  if (weight.defined())
    out = out * weight.view(bshape) + bias.view(bshape);
  return out;
}

tensor sync_batch_norm(const tensor& input, tensor running_mean, tensor running_var,
                       const tensor& weight, const tensor& bias, std::optional<double> momentum,
                       double eps, tensor num_batches_tracked,
                       const all_reduce_sum_fn& all_reduce_sum) {
  const auto [c, dims, bshape] = channel_layout(input, "sync_batch_norm");
  ACTORCH_CHECK(all_reduce_sum != nullptr, "sync_batch_norm: no all-reduce across replicas");
  // 1. Statistics over every replica's batch: per-channel sums and sums of squares (float64,
  //    so the one-pass variance loses nothing that matters) and the sample count.
  tensor mean, invstd;
  int64_t n = 0;
  {
    no_grad guard;
    const tensor x = input.to(dtype::float64);
    const tensor stats = all_reduce_sum(cat(
        {x.sum(dims), x.mul(x).sum(dims),
         full({1}, double(input.numel() / c), {.dtype = dtype::float64, .device = input.device()})},
        0));
    n = int64_t(stats.select(0, 2 * c).item<double>() + 0.5);
    ACTORCH_CHECK(n > 1,
                  "sync_batch_norm: expected more than 1 value per channel over the "
                  "replicas when training, got ",
                  n);
    const tensor mean64 = stats.narrow(0, 0, c).div(double(n));
    const tensor var64 =
        clamp(stats.narrow(0, c, c).div(double(n)).sub(mean64.mul(mean64)), 0.0, std::nullopt);
    if (running_mean.defined()) {
      if (num_batches_tracked.defined())
        num_batches_tracked.add_(1);
      ACTORCH_CHECK(momentum || num_batches_tracked.defined(),
                    "sync_batch_norm: a cumulative average (momentum unset) needs "
                    "num_batches_tracked");
      const double m = momentum ? *momentum : 1.0 / double(num_batches_tracked.item<int64_t>());
      running_mean.mul_(1 - m).add_(mean64.to(running_mean.dtype()), m);
      running_var.mul_(1 - m).add_(var64.mul(double(n) / double(n - 1)).to(running_var.dtype()), m);
    }
    mean = mean64.to(input.dtype());
    invstd = pow(var64.add(eps), -0.5).to(input.dtype());
  }
  // 2. Normalise with them.
  tensor out;
  {
    no_grad guard;
    out = input.sub(mean.view(bshape)).mul(invstd.view(bshape));
    if (weight.defined())
      out = out.mul(weight.view(bshape)).add(bias.view(bshape));
  }
  // 3. Backward: the weight and bias gradients are this replica's own sums (data-parallel
  //    training averages them like any gradient); the input gradient needs the sums of dy and
  //    dy * xhat over every replica, one more all-reduce, issued by every replica in the same
  //    place of its backward pass.
  const bool affine = weight.defined();
  auto backward = [c = c, n, dims = dims, bshape = bshape, affine, all_reduce_sum](
                      const std::vector<tensor>& grads, const std::vector<tensor>& saved) {
    const tensor& dy = grads[0];
    const tensor xhat = saved[0].sub(saved[1].view(bshape)).mul(saved[2].view(bshape));
    const tensor sum_dy = dy.sum(dims);
    const tensor sum_dy_xhat = dy.mul(xhat).sum(dims);
    std::vector<tensor> grad_in(affine ? 3 : 1);
    if (autograd::needs_input_grad(0)) {
      const tensor g =
          all_reduce_sum(cat({sum_dy.to(dtype::float64), sum_dy_xhat.to(dtype::float64)}, 0));
      const tensor mean_dy = g.narrow(0, 0, c).div(double(n)).to(dy.dtype());
      const tensor mean_dy_xhat = g.narrow(0, c, c).div(double(n)).to(dy.dtype());
      tensor scale = saved[2];
      if (affine)
        scale = scale.mul(saved[3]);
      grad_in[0] = dy.sub(mean_dy.view(bshape))
                       .sub(xhat.mul(mean_dy_xhat.view(bshape)))
                       .mul(scale.view(bshape));
    }
    if (affine) {
      grad_in[1] = sum_dy_xhat;
      grad_in[2] = sum_dy;
    }
    return grad_in;
  };
  if (affine && autograd::needs_grad({&input, &weight, &bias}))
    autograd::record(out, "SyncBatchNormBackward", {&input, &weight, &bias},
                     {input, mean, invstd, weight}, backward);
  else if (!affine && autograd::needs_grad({&input}))
    autograd::record(out, "SyncBatchNormBackward", {&input}, {input, mean, invstd}, backward);
  return out;
}

namespace {
tensor reduce(const tensor& loss, reduction r) {
  switch (r) {
  case reduction::none: return loss;
  case reduction::sum: return loss.sum();
  case reduction::mean: break;
  }
  return loss.mean();
}
} // namespace

tensor mse_loss(const tensor& input, const tensor& target, reduction r) {
  ACTORCH_CHECK(input.sizes() == target.sizes(), "mse_loss: input shape ", shape_str(input.sizes()),
                " and target shape ", shape_str(target.sizes()), " differ");
  const tensor d = input - target;
  return reduce(d * d, r);
}

tensor nll_loss(const tensor& input, const tensor& target, const tensor& weight,
                int64_t ignore_index, reduction r) {
  ACTORCH_CHECK(input.dim() == 1 || input.dim() == 2,
                "nll_loss: expected input of shape (N, C) or (C) but got ",
                shape_str(input.sizes()));
  ACTORCH_CHECK(target.dtype() == dtype::int64,
                "nll_loss: expected target of dtype int64 (class "
                "indices) but got ",
                dtype_name(target.dtype()));
  const bool batched = input.dim() == 2;
  ACTORCH_CHECK(target.dim() == (batched ? 1 : 0) && (!batched || target.size(0) == input.size(0)),
                "nll_loss: target of shape ", shape_str(target.sizes()),
                " does not match input of shape ", shape_str(input.sizes()));
  const tensor x = batched ? input : input.unsqueeze(0);
  const tensor t = batched ? target : target.unsqueeze(0);
  const int64_t classes = x.size(1);
  ACTORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == classes),
                "nll_loss: weight must have shape [", classes, "] but has ",
                shape_str(weight.sizes()));
  // Validate targets: a class index out of range is the caller's mistake, named here with its
  // position. On a GPU gather's own index check (one synchronisation instead of two) finds it,
  // and only then are the targets read back to name it the same way.
  const auto check_targets = [&](const tensor& targets) {
    const tensor tc = targets.to(kCPU).contiguous();
    const int64_t* tp = tc.data_ptr<int64_t>();
    for (int64_t i = 0; i < tc.numel(); ++i)
      ACTORCH_CHECK(tp[i] == ignore_index || (tp[i] >= 0 && tp[i] < classes), "nll_loss: target ",
                    tp[i], " at position ", i, " is out of bounds for ", classes, " classes");
  };
  if (t.device().is_cpu())
    check_targets(t);
  const tensor valid = t.ne(ignore_index);
  const tensor safe = where(valid, t, scalar(int64_t(0)));
  tensor picked;
  try {
    picked = -x.gather(1, safe.unsqueeze(1)).squeeze(1);
  } catch (const error& e) {
    check_targets(t); // names the target and its position, as on the CPU
    ACTORCH_FAIL("nll_loss: a target is out of bounds for ", classes, " classes: ", e.what());
  }
  tensor w = valid.to(x.dtype());
  if (weight.defined())
    w = w * weight.to(x.dtype()).index_select(0, safe);
  tensor loss = picked * w;
  if (r == reduction::mean)
    return loss.sum() / w.sum(); // weighted mean, as PyTorch's
  tensor out = reduce(loss, r);
  return batched || r != reduction::none ? out : out.squeeze(0);
}

tensor cross_entropy(const tensor& input, const tensor& target, const tensor& weight,
                     int64_t ignore_index, reduction r) {
  ACTORCH_CHECK(input.dim() == 1 || input.dim() == 2,
                "cross_entropy: expected input of shape (N, C) or (C) but got ",
                shape_str(input.sizes()));
  return nll_loss(input.log_softmax(input.dim() == 2 ? 1 : 0), target, weight, ignore_index, r);
}

} // namespace actorch::nn::functional
