// torchvision's transforms on decoded images (torchvision 0.14's functional_pil path), their
// tensor forms (core/data/transforms.hpp), and the fused decode of Note [Fused image path].
#include "core/data/vision/transforms.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/data/vision/decode.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"

namespace actorch::data::vision {

namespace {

template <class... Fs> struct overloaded : Fs... { using Fs::operator()...; };
template <class... Fs> overloaded(Fs...) -> overloaded<Fs...>;

// torch.empty(1).uniform_(lo, hi).
double draw_uniform(double lo, double hi) {
  return lo + (hi - lo) * draw_unit();
}

// Python's round(): half to even (the default floating-point rounding mode).
int64_t round_half_even(double v) {
  return int64_t(std::nearbyint(v));
}

image flip_if(image img, double p, bool horizontal) {
  if (draw_unit() < p) // one draw per call whatever p is, as torch.rand(1) < p
    return horizontal ? hflip(img) : vflip(img);
  return img;
}

image jitter(image img, const color_jitter& cj) {
  // torchvision's get_params: the order first (torch.randperm(4)), then one factor for each
  // adjustment that is set, in the order brightness, contrast, saturation, hue.
  std::array<int, 4> order{0, 1, 2, 3};
  for (int i = 3; i > 0; --i)
    std::swap(order[size_t(i)], order[size_t(draw_index(i + 1))]);
  std::array<std::optional<double>, 4> factor;
  const std::array<const std::optional<std::array<double, 2>>*, 4> ranges{
      &cj.brightness, &cj.contrast, &cj.saturation, &cj.hue};
  for (size_t k = 0; k < 4; ++k)
    if (*ranges[k])
      factor[k] = draw_uniform((**ranges[k])[0], (**ranges[k])[1]);
  for (const int k : order) {
    // On a grayscale image PIL's saturation blends the image with itself and torchvision's hue
    // returns it unchanged: both are the identity.
    if (!factor[size_t(k)] || (img.channels == 1 && k >= 2))
      continue;
    const double f = *factor[size_t(k)];
    switch (k) {
    case 0: img = adjust_brightness(img, f); break;
    case 1: img = adjust_contrast(img, f); break;
    case 2: img = adjust_saturation(img, f); break;
    default: img = adjust_hue(img, f); break;
    }
  }
  return img;
}

image random_crop_image(image img, const random_crop& rc) {
  const auto fill = uint8_t(std::clamp(rc.options.fill, 0.0, 255.0));
  if (!rc.options.padding.empty())
    img = pad(img, transforms::padding_ltrb(rc.options.padding, "RandomCrop"), fill);
  // torchvision pads both sides by the shortfall, the width first.
  if (rc.options.pad_if_needed && img.width < rc.size.width) {
    const int64_t d = rc.size.width - img.width;
    img = pad(img, {d, 0, d, 0}, fill);
  }
  if (rc.options.pad_if_needed && img.height < rc.size.height) {
    const int64_t d = rc.size.height - img.height;
    img = pad(img, {0, d, 0, d}, fill);
  }
  ACTORCH_CHECK(img.height >= rc.size.height && img.width >= rc.size.width,
                "RandomCrop: required crop size (", rc.size.height, ", ", rc.size.width,
                ") is larger than input image size (", img.height, ", ", img.width, ")");
  if (img.height == rc.size.height && img.width == rc.size.width)
    return img; // torchvision draws nothing then
  const int64_t top = draw_index(img.height - rc.size.height + 1);
  const int64_t left = draw_index(img.width - rc.size.width + 1);
  return crop(img, {top, left, rc.size.height, rc.size.width});
}

image apply_on_image(const step& s, image img) {
  return std::visit(
      overloaded{
          [&](const random_resized_crop& r) {
            const crop_box box =
                random_resized_crop_params(img.height, img.width, r.scale, r.ratio);
            return resized_crop(img, box, r.size, r.mode);
          },
          [&](const resize& r) { return resize_image(img, r.size, r.mode, r.max_size); },
          [&](const center_crop& c) { return center_crop_image(img, c.size); },
          [&](const random_crop& r) { return random_crop_image(std::move(img), r); },
          [&](const random_horizontal_flip& f) { return flip_if(std::move(img), f.p, true); },
          [&](const random_vertical_flip& f) { return flip_if(std::move(img), f.p, false); },
          [&](const color_jitter& c) { return jitter(std::move(img), c); },
          [&](const grayscale& g) { return rgb_to_grayscale(img, g.num_output_channels); },
          [&](const auto&) -> image {
            ACTORCH_FAIL(step_name(s), ": not a step on images"); // handled by the caller
          }},
      s);
}

tensor vflip_tensor(const tensor& t) {
  return transforms::hflip(t.transpose(-1, -2)).transpose(-1, -2).contiguous();
}

tensor apply_on_tensor(const step& s, const tensor& t) {
  auto bilinear_only = [&](interpolation mode) {
    ACTORCH_CHECK(mode == interpolation::bilinear, step_name(s),
                  ": on a tensor only bilinear interpolation is supported; apply it to the image "
                  "(before ToTensor) for the others");
  };
  return std::visit(
      overloaded{
          [&](const random_resized_crop& r) {
            bilinear_only(r.mode);
            ACTORCH_CHECK(t.dim() >= 2, "RandomResizedCrop: expected (..., H, W) but got ", t.dim(),
                          " dims");
            const crop_box b = random_resized_crop_params(t.size(-2), t.size(-1), r.scale, r.ratio);
            const tensor c = t.narrow(-2, b.top, b.height).narrow(-1, b.left, b.width);
            return transforms::resize(c, {r.size.height, r.size.width});
          },
          [&](const resize& r) {
            bilinear_only(r.mode);
            return transforms::resize(t, r.size, {.max_size = r.max_size});
          },
          [&](const center_crop& c) { return transforms::center_crop(c.size)(t); },
          [&](const random_crop& r) { return transforms::random_crop(r.size, r.options)(t); },
          [&](const random_horizontal_flip& f) {
            return transforms::random_horizontal_flip(f.p)(t);
          },
          [&](const random_vertical_flip& f) { return draw_unit() < f.p ? vflip_tensor(t) : t; },
          [&](const to_tensor&) { return transforms::to_tensor(t); },
          [&](const normalize& n) { return transforms::normalize(t, n.mean, n.std); },
          [&](const tensor_step& f) { return f.fn(t); },
          [&](const auto&) -> tensor {
            ACTORCH_FAIL(step_name(s),
                         ": on a tensor is not supported; apply it to the image, before "
                         "ToTensor");
          }},
      s);
}

// Note [Fused image path]
// ~~~~~~~~~~~~~~~~~~~~~~~
// torchvision decodes the whole file, crops, then resizes the crop
// with PIL's filters. A RandomResizedCrop to 224 x 224 usually keeps a crop far larger than
// 224 px, so most decoded pixels are thrown away or averaged together. libjpeg can instead
// decode at 1/2, 1/4 or 1/8 scale in the DCT (much less work) and only the rows and iMCU
// columns of a region. load() draws the crop exactly as the unfused path would (same draws,
// same order: the batch's generator is in the same state after either), picks the smallest
// scale at which the crop stays at least as large as the output in both dims, decodes only
// that region, and resizes it from the crop's box in the scaled coordinates. The result
// differs from the unfused one by the DCT's downscaling against PIL's filter (and, at the
// region's edges, by the filter reading a pixel beyond a fractional box); the tests bound it.
// A tail of flips, ToTensor and Normalize then writes the float output in one pass (the same
// float operations as the unfused steps, so that part is exact).
int pick_scale_denom(int64_t crop_w, int64_t crop_h, int64_t out_w, int64_t out_h) {
  for (const int d : {8, 4, 2})
    if (crop_w >= out_w * d && crop_h >= out_h * d)
      return d;
  return 1;
}

// The tail of flips, ToTensor and an optional Normalize in one pass, or nullopt when `rest` is
// not such a tail (then the steps run one by one).
std::optional<tensor> fused_tail(const std::vector<step>& steps, size_t first, const image& img) {
  size_t k = first;
  while (k < steps.size() && (std::holds_alternative<random_horizontal_flip>(steps[k]) ||
                              std::holds_alternative<random_vertical_flip>(steps[k])))
    ++k;
  if (k >= steps.size() || !std::holds_alternative<to_tensor>(steps[k]))
    return std::nullopt;
  const normalize* norm = nullptr;
  if (k + 1 < steps.size()) {
    norm = std::get_if<normalize>(&steps[k + 1]);
    if (norm == nullptr || k + 2 != steps.size())
      return std::nullopt;
    for (const auto* v : {&norm->mean, &norm->std})
      if (v->size() != 1 && int64_t(v->size()) != img.channels)
        return std::nullopt; // normalize's own check names the mismatch
  }
  bool flip_x = false, flip_y = false;
  for (size_t i = first; i < k; ++i) {
    if (const auto* h = std::get_if<random_horizontal_flip>(&steps[i]))
      flip_x ^= draw_unit() < h->p;
    else
      flip_y ^= draw_unit() < std::get<random_vertical_flip>(steps[i]).p;
  }
  const int64_t C = img.channels, H = img.height, W = img.width;
  tensor out = empty({C, H, W}, {.dtype = dtype::float32});
  float* o = out.data_ptr<float>();
  for (int64_t c = 0; c < C; ++c) {
    const float m = norm ? float(norm->mean[norm->mean.size() == 1 ? 0 : size_t(c)]) : 0.0f;
    const float sd = norm ? float(norm->std[norm->std.size() == 1 ? 0 : size_t(c)]) : 1.0f;
    // Each of the 256 byte values through ToTensor's division and Normalize's two float ops,
    // once: the same floats the unfused steps compute.
    std::array<float, 256> lut;
    for (int v = 0; v < 256; ++v) {
      const float x = float(v) / 255.0f;
      lut[size_t(v)] = norm ? (x - m) / sd : x;
    }
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* row = img.row(flip_y ? H - 1 - y : y) + c;
      float* dst = o + (c * H + y) * W;
      if (flip_x)
        for (int64_t x = 0; x < W; ++x)
          dst[x] = lut[row[(W - 1 - x) * C]];
      else
        for (int64_t x = 0; x < W; ++x)
          dst[x] = lut[row[x * C]];
    }
  }
  return out;
}

tensor finish(const std::vector<step>& steps, size_t first, image img) {
  if (auto t = fused_tail(steps, first, img))
    return std::move(*t);
  return result_tensor(run_steps(std::span(steps).subspan(first), std::move(img)));
}

} // namespace

std::optional<std::array<double, 2>>
color_jitter_range(const char* name, std::optional<double> number, std::array<double, 2> range) {
  const bool hue = std::string_view(name) == "hue";
  const double center = hue ? 0.0 : 1.0;
  if (number) {
    ACTORCH_CHECK(*number >= 0, "ColorJitter: If ", name,
                  " is a single number, it must be non negative, but got ", *number);
    range = {center - *number, center + *number};
    if (!hue)
      range[0] = std::max(range[0], 0.0);
  }
  const double lo = hue ? -0.5 : 0.0, hi = hue ? 0.5 : std::numeric_limits<double>::infinity();
  ACTORCH_CHECK(lo <= range[0] && range[0] <= range[1] && range[1] <= hi, "ColorJitter: ", name,
                " values should be between (", lo, ", ", hi, ") but got (", range[0], ", ",
                range[1], ")");
  if (range[0] == center && range[1] == center)
    return std::nullopt;
  return range;
}

color_jitter make_color_jitter(double brightness, double contrast, double saturation, double hue) {
  return {color_jitter_range("brightness", brightness), color_jitter_range("contrast", contrast),
          color_jitter_range("saturation", saturation), color_jitter_range("hue", hue)};
}

const char* step_name(const step& s) {
  static constexpr const char* names[] = {
      "RandomResizedCrop",  "Resize",      "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
      "RandomVerticalFlip", "ColorJitter", "Grayscale",  "ToTensor",   "Normalize"};
  if (const auto* t = std::get_if<tensor_step>(&s))
    return t->name.c_str();
  return names[s.index()];
}

void check_step(const step& s) {
  auto positive = [&](transforms::crop_size c) {
    ACTORCH_CHECK(c.height > 0 && c.width > 0, step_name(s), ": size must be positive but got (",
                  c.height, ", ", c.width, ")");
  };
  std::visit(
      overloaded{
          [&](const random_resized_crop& r) {
            positive(r.size);
            ACTORCH_CHECK(r.scale[0] <= r.scale[1] && r.ratio[0] <= r.ratio[1],
                          "RandomResizedCrop: scale and ratio should be of kind (min, max) but got "
                          "scale (",
                          r.scale[0], ", ", r.scale[1], ") and ratio (", r.ratio[0], ", ",
                          r.ratio[1], ")");
            ACTORCH_CHECK(r.scale[0] > 0 && r.ratio[0] > 0,
                          "RandomResizedCrop: scale and ratio must be positive but got scale (",
                          r.scale[0], ", ", r.scale[1], ") and ratio (", r.ratio[0], ", ",
                          r.ratio[1], ")");
          },
          [&](const resize& r) {
            ACTORCH_CHECK(r.size.size() == 1 || r.size.size() == 2,
                          "Resize: size should be an int or a sequence of length 1 or 2 but got ",
                          r.size.size(), " values");
            for (const int64_t v : r.size)
              ACTORCH_CHECK(v > 0, "Resize: size must be positive but got ", v);
            ACTORCH_CHECK(!r.max_size || r.size.size() == 1,
                          "Resize: max_size should only be passed if size specifies the length of "
                          "the smaller edge, i.e. size should be an int or a sequence of length 1");
            ACTORCH_CHECK(!r.max_size || *r.max_size > r.size[0],
                          "Resize: max_size = ", r.max_size.value_or(0),
                          " must be strictly greater than the requested size for the smaller "
                          "edge size = ",
                          r.size[0]);
          },
          [&](const center_crop& c) { positive(c.size); },
          [&](const random_crop& r) {
            positive(r.size);
            (void)transforms::padding_ltrb(r.options.padding, "RandomCrop");
          },
          [&](const random_horizontal_flip& f) {
            ACTORCH_CHECK(f.p >= 0 && f.p <= 1,
                          "RandomHorizontalFlip: p must be in [0, 1] but "
                          "got ",
                          f.p);
          },
          [&](const random_vertical_flip& f) {
            ACTORCH_CHECK(f.p >= 0 && f.p <= 1, "RandomVerticalFlip: p must be in [0, 1] but got ",
                          f.p);
          },
          [&](const grayscale& g) {
            ACTORCH_CHECK(g.num_output_channels == 1 || g.num_output_channels == 3,
                          "Grayscale: num_output_channels should be either 1 or 3 but got ",
                          g.num_output_channels);
          },
          [&](const normalize& n) {
            ACTORCH_CHECK(!n.mean.empty() && !n.std.empty(),
                          "Normalize: mean and std need at least one value");
            for (size_t c = 0; c < n.std.size(); ++c)
              ACTORCH_CHECK(n.std[c] != 0,
                            "Normalize: std evaluated to zero after conversion to "
                            "float32 (std[",
                            c, "] is 0), leading to division by zero");
          },
          [&](const tensor_step& t) {
            ACTORCH_CHECK(t.fn != nullptr, t.name, ": the transform is empty");
          },
          [](const auto&) {}},
      s);
}

image_or_tensor run_steps(std::span<const step> steps, image_or_tensor x) {
  for (const step& s : steps) {
    if (auto* img = std::get_if<image>(&x)) {
      if (std::holds_alternative<to_tensor>(s)) {
        x = image_to_float(*img);
      } else if (const auto* t = std::get_if<tensor_step>(&s)) {
        x = t->fn(image_to_tensor(*img));
      } else {
        ACTORCH_CHECK(!std::holds_alternative<normalize>(s),
                      "Normalize: expected a tensor image but got a decoded image; put ToTensor "
                      "before Normalize");
        x = apply_on_image(s, std::move(*img));
      }
    } else {
      x = apply_on_tensor(s, std::get<tensor>(x));
    }
  }
  return x;
}

tensor result_tensor(image_or_tensor x) {
  if (auto* i = std::get_if<image>(&x))
    return image_to_tensor(*i);
  return std::get<tensor>(std::move(x));
}

transforms::transform tensor_transform(std::vector<step> steps) {
  for (const step& s : steps)
    check_step(s);
  return
      [steps = std::move(steps)](const tensor& t) { return std::get<tensor>(run_steps(steps, t)); };
}

tensor load(const std::vector<step>& steps, const uint8_t* data, size_t size,
            const std::string& name, bool fuse) {
  if (!fuse || steps.empty() || sniff_format(data, size) != image_format::jpeg)
    return finish(steps, 0, decode_image(data, size, name));
  const image_info info = read_image_info(data, size, name);
  if (const auto* r = std::get_if<random_resized_crop>(&steps[0])) {
    // See Note [Fused image path].
    const crop_box box = random_resized_crop_params(info.height, info.width, r->scale, r->ratio);
    const int d = pick_scale_denom(box.width, box.height, r->size.width, r->size.height);
    const auto [sw, sh] = jpeg_scaled_size(info.width, info.height, d);
    const double fx = double(sw) / double(info.width), fy = double(sh) / double(info.height);
    const double x0 = double(box.left) * fx, x1 = double(box.left + box.width) * fx;
    const double y0 = double(box.top) * fy, y1 = double(box.top + box.height) * fy;
    jpeg_region region;
    region.left = int64_t(std::floor(x0));
    region.top = int64_t(std::floor(y0));
    region.width = std::min(sw, int64_t(std::ceil(x1))) - region.left;
    region.height = std::min(sh, int64_t(std::ceil(y1))) - region.top;
    region.scale_denom = d;
    const image part = decode_jpeg_region(data, size, name, region);
    const double bx = double(region.left), by = double(region.top);
    const std::array<double, 4> from{x0 - bx, y0 - by, std::min(x1 - bx, double(part.width)),
                                     std::min(y1 - by, double(part.height))};
    return finish(steps, 1, resample(part, r->size.width, r->size.height, r->mode, from));
  }
  if (const auto* r = std::get_if<resize>(&steps[0])) {
    const auto [rh, rw] = transforms::resized_size(info.height, info.width, r->size, r->max_size);
    const int d = pick_scale_denom(info.width, info.height, rw, rh);
    if (d > 1) {
      const auto [sw, sh] = jpeg_scaled_size(info.width, info.height, d);
      jpeg_region region{0, 0, sw, sh, d};
      const image scaled = decode_jpeg_region(data, size, name, region);
      return finish(steps, 1, resample(scaled, rw, rh, r->mode));
    }
  }
  return finish(steps, 0, decode_image(data, size, name));
}

tensor image_to_tensor(const image& img) {
  tensor t = empty({img.height, img.width, img.channels}, {.dtype = dtype::uint8});
  if (img.bytes() > 0)
    std::memcpy(t.data_ptr<uint8_t>(), img.pixels.get(), size_t(img.bytes()));
  return t;
}

image image_from_tensor(const tensor& t, const char* who) {
  ACTORCH_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == dtype::uint8 &&
                    (t.dim() == 2 || (t.dim() == 3 && (t.size(2) == 1 || t.size(2) == 3))),
                who,
                ": expected an image, uint8 (H, W) or (H, W, C) with C 1 or 3, on the CPU, but "
                "got ",
                t.defined() ? shape_str(t.sizes()) : std::string("an undefined tensor"),
                t.defined() ? detail::concat(" ", dtype_name(t.dtype())) : std::string());
  const tensor c = t.contiguous();
  image img(c.size(0), c.size(1), c.dim() == 3 ? c.size(2) : 1);
  if (img.bytes() > 0)
    std::memcpy(img.pixels.get(), c.data_ptr<uint8_t>(), size_t(img.bytes()));
  return img;
}

crop_box random_resized_crop_params(int64_t height, int64_t width, std::array<double, 2> scale,
                                    std::array<double, 2> ratio) {
  const double area = double(height) * double(width);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * draw_uniform(scale[0], scale[1]);
    const double aspect = std::exp(draw_uniform(log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = draw_index(height - h + 1);
      const int64_t left = draw_index(width - w + 1);
      return {top, left, h, w};
    }
  }
  // Fallback to a central crop of the ratio clamped into range.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(ratio[0], ratio[1])) {
    h = round_half_even(double(w) / std::min(ratio[0], ratio[1]));
  } else if (in_ratio > std::max(ratio[0], ratio[1])) {
    w = round_half_even(double(h) * std::max(ratio[0], ratio[1]));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

image crop(const image& img, const crop_box& box) {
  return vision::crop(img, box.left, box.top, box.width, box.height);
}

image center_crop_image(const image& img, transforms::crop_size size) {
  const image* src = &img;
  image padded;
  if (size.width > img.width || size.height > img.height) {
    // torchvision pads (crop - image) // 2 on the left and top, the rest on the other sides.
    const int64_t pw = std::max<int64_t>(size.width - img.width, 0);
    const int64_t ph = std::max<int64_t>(size.height - img.height, 0);
    padded = pad(img, {pw / 2, ph / 2, (pw + 1) / 2, (ph + 1) / 2}, 0);
    src = &padded;
    if (size.width == src->width && size.height == src->height)
      return padded;
  }
  const int64_t top = round_half_even(double(src->height - size.height) / 2.0);
  const int64_t left = round_half_even(double(src->width - size.width) / 2.0);
  return vision::crop(*src, left, top, size.width, size.height);
}

image resize_image(const image& img, const std::vector<int64_t>& size, interpolation mode,
                   std::optional<int64_t> max_size) {
  const auto [h, w] = transforms::resized_size(img.height, img.width, size, max_size);
  return resample(img, w, h, mode);
}

image resized_crop(const image& img, const crop_box& box, transforms::crop_size size,
                   interpolation mode) {
  return resample(crop(img, box), size.width, size.height, mode);
}

image pad(const image& img, const std::array<int64_t, 4>& ltrb, uint8_t fill) {
  const auto [l, t, r, b] = ltrb;
  image out(img.height + t + b, img.width + l + r, img.channels);
  std::memset(out.pixels.get(), fill, size_t(out.bytes()));
  for (int64_t y = 0; y < img.height; ++y)
    std::memcpy(out.row(y + t) + l * img.channels, img.row(y), size_t(img.row_bytes()));
  return out;
}

image rgb_to_grayscale(const image& img, int64_t num_output_channels) {
  ACTORCH_CHECK(num_output_channels == 1 || num_output_channels == 3,
                "Grayscale: num_output_channels should be either 1 or 3 but got ",
                num_output_channels);
  image l = img.channels == 1 ? clone(img) : to_grayscale(img);
  return num_output_channels == 1 ? std::move(l) : gray_to_rgb(l);
}

tensor image_to_float(const image& img) {
  const int64_t C = img.channels, H = img.height, W = img.width;
  tensor out = empty({C, H, W}, {.dtype = dtype::float32});
  float* o = out.data_ptr<float>();
  std::array<float, 256> lut;
  for (int v = 0; v < 256; ++v)
    lut[size_t(v)] = float(v) / 255.0f;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* row = img.row(y) + c;
      float* dst = o + (c * H + y) * W;
      for (int64_t x = 0; x < W; ++x)
        dst[x] = lut[row[x * C]];
    }
  return out;
}

} // namespace actorch::data::vision
