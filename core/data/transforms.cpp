// Per-sample transforms (torchvision.transforms' semantics). Crops copy the kept window into a
// fresh tensor pre-filled with the padding value, so padding never materialises a padded image;
// normalize and hflip loop over contiguous memory. Randomness comes from batch_generator(),
// one Philox block per draw. See Note [Batch randomness] in worker_info.hpp.
#include "core/data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/shape_ops.hpp"
#include "core/tensor_iterator.hpp"

namespace actorch::data::transforms {

namespace {

void check_image(const char* op, const tensor& t, int64_t min_dim) {
  check_defined(op, {&t});
  check_cpu(op, {&t});
  ACTORCH_CHECK(t.dim() >= min_dim, op, ": expected an image with at least ", min_dim,
                " dims but got ", t.dim(), " (shape ", shape_str(t.sizes()), ")");
}

// The window [top, top + h) x [left, left + w) of the last two dims of t, where rows and
// columns outside t read as `fill` (the padding of random_crop and center_crop).
tensor crop_window(const tensor& t, int64_t top, int64_t left, int64_t h, int64_t w, double fill) {
  const int64_t H = t.size(-2), W = t.size(-1);
  if (top >= 0 && left >= 0 && top + h <= H && left + w <= W)
    return t.narrow(-2, top, h).narrow(-1, left, w);
  shape_t out_shape = t.sizes();
  out_shape[out_shape.size() - 2] = h;
  out_shape[out_shape.size() - 1] = w;
  tensor out = full(out_shape, fill, {.dtype = t.dtype()});
  // The overlap, in source rows [r0, r1) and columns [c0, c1).
  const int64_t r0 = std::max<int64_t>(top, 0), r1 = std::min(top + h, H);
  const int64_t c0 = std::max<int64_t>(left, 0), c1 = std::min(left + w, W);
  if (r0 < r1 && c0 < c1)
    out.narrow(-2, r0 - top, r1 - r0)
        .narrow(-1, c0 - left, c1 - c0)
        .copy_(t.narrow(-2, r0, r1 - r0).narrow(-1, c0, c1 - c0));
  return out;
}

std::string sizes_str(int64_t h, int64_t w) {
  std::ostringstream os;
  os << '(' << h << ", " << w << ')';
  return os.str();
}

} // namespace

transform compose(std::vector<transform> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i)
    ACTORCH_CHECK(transforms[i] != nullptr, "compose: transform ", i, " is empty");
  return [ts = std::move(transforms)](const tensor& x) {
    tensor y = x;
    for (const auto& t : ts)
      y = t(y);
    return y;
  };
}

tensor to_tensor(const tensor& image) {
  const char* op = "to_tensor";
  check_defined(op, {&image});
  ACTORCH_CHECK(image.dim() == 2 || image.dim() == 3, op,
                ": expected an image (H, W) or (H, W, C) but got shape ", shape_str(image.sizes()));
  const tensor hwc = image.dim() == 2 ? image.unsqueeze(2) : image;
  const tensor chw = hwc.permute({2, 0, 1});
  if (image.dtype() != dtype::uint8)
    return chw.contiguous();
  tensor out = empty(chw.sizes(), {.dtype = dtype::float32});
  const tensor src = chw.contiguous();
  const uint8_t* s = src.data_ptr<uint8_t>();
  float* d = out.data_ptr<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i)
    d[i] = float(s[i]) / 255.0f;
  return out;
}

transform to_tensor() {
  return [](const tensor& x) { return to_tensor(x); };
}

tensor normalize(const tensor& image, const std::vector<double>& mean,
                 const std::vector<double>& std) {
  const char* op = "normalize";
  check_image(op, image, 3);
  ACTORCH_CHECK(image.is_floating_point(), op, ": expected a floating image but got ",
                dtype_name(image.dtype()), " (apply to_tensor first)");
  const int64_t C = image.size(-3);
  for (const auto* v : {&mean, &std})
    ACTORCH_CHECK(v->size() == 1 || int64_t(v->size()) == C, op, ": ", v == &mean ? "mean" : "std",
                  " has ", v->size(), " values but the image has ", C, " channels (shape ",
                  shape_str(image.sizes()), ")");
  for (size_t c = 0; c < std.size(); ++c)
    ACTORCH_CHECK(std[c] != 0, op, ": std[", c, "] is 0 (division by zero)");
  const tensor in = image.contiguous();
  tensor out = empty(in.sizes(), {.dtype = in.dtype()});
  const int64_t plane = in.size(-1) * in.size(-2);
  const int64_t outer = C == 0 || plane == 0 ? 0 : in.numel() / (C * plane);
  dispatch(in.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      using V = compute_t<T>;
      const T* s = in.data_ptr<T>();
      T* d = out.data_ptr<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const V m = V(mean[mean.size() == 1 ? 0 : size_t(c)]);
          const V sd = V(std[std.size() == 1 ? 0 : size_t(c)]);
          const int64_t base = (o * C + c) * plane;
          for (int64_t i = 0; i < plane; ++i)
            d[base + i] = T((V(s[base + i]) - m) / sd);
        }
    }
  });
  return out;
}

transform normalize(std::vector<double> mean, std::vector<double> std) {
  ACTORCH_CHECK(!mean.empty() && !std.empty(), "normalize: mean and std need at least one value");
  for (size_t c = 0; c < std.size(); ++c)
    ACTORCH_CHECK(std[c] != 0, "normalize: std[", c, "] is 0 (division by zero)");
  return [mean = std::move(mean), std = std::move(std)](const tensor& x) {
    return normalize(x, mean, std);
  };
}

std::array<int64_t, 4> padding_ltrb(const std::vector<int64_t>& p, const char* who) {
  ACTORCH_CHECK(p.size() == 0 || p.size() == 1 || p.size() == 2 || p.size() == 4, who,
                ": padding takes 1, 2 or 4 values but got ", p.size());
  for (const int64_t v : p)
    ACTORCH_CHECK(v >= 0, who, ": padding must be >= 0 but got ", v);
  switch (p.size()) {
  case 0: return {0, 0, 0, 0};
  case 1: return {p[0], p[0], p[0], p[0]};
  case 2: return {p[0], p[1], p[0], p[1]};
  default: return {p[0], p[1], p[2], p[3]};
  }
}

transform random_crop(crop_size size, random_crop_options opts) {
  ACTORCH_CHECK(size.height > 0 && size.width > 0, "random_crop: size must be positive but got ",
                sizes_str(size.height, size.width));
  const std::array<int64_t, 4> pad = padding_ltrb(opts.padding, "random_crop");
  return [size, opts, pad0 = pad[0], pad1 = pad[1], pad2 = pad[2], pad3 = pad[3]](const tensor& x) {
    check_image("random_crop", x, 2);
    int64_t left = pad0, top = pad1, right = pad2, bottom = pad3;
    int64_t H = x.size(-2) + top + bottom, W = x.size(-1) + left + right;
    if (opts.pad_if_needed && H < size.height) {
      const int64_t more = size.height - H;
      top += more, bottom += more, H += 2 * more;
    }
    if (opts.pad_if_needed && W < size.width) {
      const int64_t more = size.width - W;
      left += more, right += more, W += 2 * more;
    }
    ACTORCH_CHECK(H >= size.height && W >= size.width, "random_crop: the crop ",
                  sizes_str(size.height, size.width), " is larger than the padded image ",
                  sizes_str(H, W), " (image shape ", shape_str(x.sizes()), ")");
    int64_t i = 0, j = 0; // offsets in the padded image
    if (H != size.height || W != size.width) {
      i = draw_index(H - size.height + 1);
      j = draw_index(W - size.width + 1);
    }
    return crop_window(x, i - top, j - left, size.height, size.width, opts.fill);
  };
}

transform center_crop(crop_size size) {
  ACTORCH_CHECK(size.height > 0 && size.width > 0, "center_crop: size must be positive but got ",
                sizes_str(size.height, size.width));
  return [size](const tensor& x) {
    check_image("center_crop", x, 2);
    const int64_t H = x.size(-2), W = x.size(-1);
    // torchvision pads a smaller image by (diff // 2) before and (diff + 1) // 2 after, then
    // takes round((H - h) / 2) (Python's round: half to even) as the top offset.
    const int64_t pad_top = H < size.height ? (size.height - H) / 2 : 0;
    const int64_t pad_left = W < size.width ? (size.width - W) / 2 : 0;
    const int64_t PH = std::max(H, size.height), PW = std::max(W, size.width);
    const int64_t top = int64_t(std::nearbyint(double(PH - size.height) / 2.0));
    const int64_t left = int64_t(std::nearbyint(double(PW - size.width) / 2.0));
    return crop_window(x, top - pad_top, left - pad_left, size.height, size.width, 0.0);
  };
}

tensor hflip(const tensor& image) {
  check_image("hflip", image, 1);
  const tensor in = image.contiguous();
  tensor out = empty(in.sizes(), {.dtype = in.dtype()});
  const int64_t W = in.size(-1);
  const int64_t rows = W == 0 ? 0 : in.numel() / W;
  dispatch(in.dtype(), [&]<class T>() {
    const T* s = in.data_ptr<T>();
    T* d = out.data_ptr<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < W; ++c)
        d[r * W + c] = s[r * W + (W - 1 - c)];
  });
  return out;
}

transform random_horizontal_flip(double p) {
  ACTORCH_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1] but got ", p);
  return [p](const tensor& x) {
    // One draw per call whatever p is, as torchvision's torch.rand(1) < p.
    return draw_unit() < p ? hflip(x) : x;
  };
}

// Resize. -------------------------------------------------------------------------------------

namespace {

/// The taps of one output index along a dim resized from `in` to `out`: the first input index
/// and one weight per input index from there.
struct taps {
  int64_t first = 0;
  std::vector<double> weights;
};

/// PyTorch's bilinear weights along one dim, align_corners=False: without antialias, the two
/// neighbours of the source coordinate (i + 0.5) * in / out - 0.5 (clamped at 0), as
/// upsample_bilinear2d; with it, the triangle filter stretched by the scale when shrinking and
/// normalised over the taps inside the image, as _upsample_bilinear2d_aa (and PIL).
std::vector<taps> bilinear_taps(int64_t in, int64_t out, bool antialias) {
  const double scale = double(in) / double(out);
  std::vector<taps> all(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    taps& t = all[size_t(i)];
    if (!antialias) {
      const double src = std::max(scale * (double(i) + 0.5) - 0.5, 0.0);
      t.first = int64_t(src);
      const double lambda = src - double(t.first);
      // At the last index both taps are that index (torch's h1p = 0): its weight is 1.
      t.weights =
          t.first < in - 1 ? std::vector<double>{1.0 - lambda, lambda} : std::vector<double>{1.0};
      continue;
    }
    const double support = scale >= 1.0 ? scale : 1.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    const double center = scale * (double(i) + 0.5);
    t.first = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    const int64_t count = std::min<int64_t>(int64_t(center + support + 0.5), in) - t.first;
    double total = 0;
    for (int64_t j = 0; j < count; ++j) {
      const double x = std::abs((double(j + t.first) - center + 0.5) * invscale);
      t.weights.push_back(x < 1.0 ? 1.0 - x : 0.0);
      total += t.weights.back();
    }
    if (total != 0)
      for (double& w : t.weights)
        w /= total;
  }
  return all;
}

} // namespace

std::pair<int64_t, int64_t> resized_size(int64_t h, int64_t w, const std::vector<int64_t>& size,
                                         std::optional<int64_t> max_size) {
  ACTORCH_CHECK(size.size() == 1 || size.size() == 2,
                "resize: size must be {shorter edge} or {height, width} but has ", size.size(),
                " values");
  for (const int64_t s : size)
    ACTORCH_CHECK(s > 0, "resize: size must be positive but got ", s);
  if (size.size() == 2) {
    ACTORCH_CHECK(!max_size,
                  "resize: max_size applies only when size is the shorter edge alone, "
                  "not to {height, width} = ",
                  sizes_str(size[0], size[1]));
    return {size[0], size[1]};
  }
  const int64_t shorter = std::min(h, w), longer = std::max(h, w);
  int64_t new_short = size[0];
  auto new_long = int64_t(double(new_short) * double(longer) / double(shorter));
  if (max_size) {
    ACTORCH_CHECK(*max_size > size[0], "resize: max_size = ", *max_size,
                  " must be strictly greater than the requested size ", size[0]);
    if (new_long > *max_size) {
      new_short = int64_t(double(*max_size) * double(new_short) / double(new_long));
      new_long = *max_size;
    }
  }
  return w <= h ? std::pair{new_long, new_short} : std::pair{new_short, new_long};
}

tensor resize(const tensor& image, const std::vector<int64_t>& size, const resize_options& opts) {
  check_image("resize", image, 2);
  const int64_t H = image.size(-2), W = image.size(-1);
  ACTORCH_CHECK(H > 0 && W > 0, "resize: cannot resize an empty image of shape ",
                shape_str(image.sizes()));
  ACTORCH_CHECK(image.dtype() != dtype::bool_, "resize: a bool image cannot be interpolated");
  const auto [h, w] = resized_size(H, W, size, opts.max_size);
  const auto rows = bilinear_taps(H, h, opts.antialias);
  const auto cols = bilinear_taps(W, w, opts.antialias);
  // In float64, planes of H x W: columns first into a (planes, H, w) buffer, then rows.
  const tensor src = image.to(dtype::float64).contiguous();
  const int64_t planes = image.numel() / (H * W);
  std::vector<double> mid(size_t(planes * H * w));
  tensor out64 = empty({planes, h, w}, {.dtype = dtype::float64});
  const bool integral = is_integral(image.dtype()); // rounded half to even, as torch.round
  const double* in = src.data_ptr<double>();
  double* o = out64.data_ptr<double>();
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t y = 0; y < H; ++y) {
      const double* row = in + (p * H + y) * W;
      for (int64_t x = 0; x < w; ++x) {
        const taps& t = cols[size_t(x)];
        double acc = 0;
        for (size_t k = 0; k < t.weights.size(); ++k)
          acc += t.weights[k] * row[t.first + int64_t(k)];
        mid[size_t((p * H + y) * w + x)] = acc;
      }
    }
    for (int64_t y = 0; y < h; ++y) {
      const taps& t = rows[size_t(y)];
      for (int64_t x = 0; x < w; ++x) {
        double acc = 0;
        for (size_t k = 0; k < t.weights.size(); ++k)
          acc += t.weights[k] * mid[size_t((p * H + t.first + int64_t(k)) * w + x)];
        o[(p * h + y) * w + x] = integral ? std::nearbyint(acc) : acc;
      }
    }
  }
  shape_t shape = image.sizes();
  shape[shape.size() - 2] = h;
  shape[shape.size() - 1] = w;
  return out64.view(shape).to(image.dtype());
}

transform resize(std::vector<int64_t> size, resize_options opts) {
  (void)resized_size(1, 1, size, opts.max_size); // a bad size fails here, not in a worker
  return [size = std::move(size), opts](const tensor& x) { return resize(x, size, opts); };
}

transform lambda_(std::function<tensor(const tensor&)> fn) {
  ACTORCH_CHECK(fn != nullptr, "lambda_: the function is empty");
  return fn;
}

transformed_dataset::transformed_dataset(dataset_ptr dataset, transforms::transform image_transform,
                                         transforms::transform target_transform)
    : dataset_(std::move(dataset)), transform_(std::move(image_transform)),
      target_transform_(std::move(target_transform)) {
  ACTORCH_CHECK(dataset_ != nullptr, "transformed_dataset: the dataset is null");
  ACTORCH_CHECK(transform_ || target_transform_,
                "transformed_dataset: give a transform, a target_transform or both");
}

sample transformed_dataset::get(int64_t index) const {
  sample s = dataset_->get(index);
  // The tensors are replaced in place (for_each_tensor on a tensor sample visits just it),
  // rather than assigning new samples over the old ones.
  auto apply = [](sample& item, const transforms::transform& t) {
    item.for_each_tensor([&](tensor& x) { x = t(x); });
  };
  if (s.is_tensor()) {
    if (transform_)
      apply(s, transform_);
    return s;
  }
  ACTORCH_CHECK(s.is_tuple() && s.size() >= 1 && s[0].is_tensor(), "transformed_dataset: sample ",
                index, " is neither a tensor nor an (image, target, ...) tuple: ", s.str());
  sample::tuple& items = s.as_tuple();
  if (transform_)
    apply(items[0], transform_);
  if (target_transform_) {
    ACTORCH_CHECK(items.size() >= 2 && items[1].is_tensor(), "transformed_dataset: sample ", index,
                  " has no tensor target for target_transform: ", s.str());
    apply(items[1], target_transform_);
  }
  return s;
}

} // namespace actorch::data::transforms
