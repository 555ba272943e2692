// Pillow 9.4's pixel arithmetic, rewritten for interleaved 8-bit RGB and L images: separable
// fixed-point resampling (libImaging/Resample.c), nearest-neighbour scaling (Geometry.c), crop,
// flips, the RGB/L/HSV/CMYK conversions (Convert.c) and blend (Blend.c). Each function follows
// Pillow's operation order and float types so the bytes match; see Note [Float rounding].
#include "core/data/vision/pixels.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>
#include <vector>

#include "base/error.hpp"

// Note [Float rounding]
// ~~~~~~~~~~~~~~~~~~~~~
// Pillow's results depend on where its C code rounds: which sums are done in float and which in
// double, and that a * b + c rounds the product before adding. The code below spells out every
// float/double conversion Pillow's code makes, and it must not be compiled with floating-point
// contraction into fused multiply-adds (GCC's default in GNU mode once -march enables FMA; it
// shifts Blend.c's sums by 1), nor with -ffast-math. The pragmas below switch contraction off
// (an explicit clang -ffp-contract=fast overrides them).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace actorch::data::vision {

namespace {

void check_channels(const image& in, const char* op) {
  ACTORCH_CHECK(in.channels == 1 || in.channels == 3, op,
                ": expected an RGB (3 channels) or L (1 channel) image but got ", in.channels,
                " channels");
}

// ---------------------------------------------------------------------------------------------
// Resampling

// Note [Pillow's resampling]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Pillow resizes in two separable passes. For each output column (then row) it centres the
// filter, scaled by max(in/out, 1), on the output pixel's centre mapped into the box, weighs the
// input pixels under it, normalises the weights to sum 1 and rounds them to fixed point with
// precision_bits fractional bits. A pass sums byte * weight in int32 from half a unit, shifts
// and clamps to [0, 255]. The horizontal pass runs first, over only the input rows the vertical
// pass reads; a pass is skipped when its axis keeps its size and the box spans it exactly. An
// integer box whose size equals the output size is a plain crop, and nearest samples the input
// at pixel centres by stepping a double coordinate (Geometry.c's ImagingScaleAffine).

// Two bits of headroom for filters with negative lobes, 8 bits for the byte itself.
constexpr int precision_bits = 32 - 8 - 2;
constexpr int32_t half_unit = 1 << (precision_bits - 1);

struct filter {
  double (*weight)(double x);
  double support;
};

double box_weight(double x) {
  return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
}

double bilinear_weight(double x) {
  x = x < 0.0 ? -x : x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_weight(double x) {
  x = x < 0.0 ? -x : x;
  if (x == 0.0)
    return 1.0;
  if (x >= 1.0)
    return 0.0;
  x = x * std::numbers::pi;
  // Pillow writes these constants as floats: keep their float values.
  return std::sin(x) / x * (double(0.54f) + double(0.46f) * std::cos(x));
}

double bicubic_weight(double x) {
  constexpr double a = -0.5;
  x = x < 0.0 ? -x : x;
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0)
    return 1.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x;
}

double lanczos_weight(double x) {
  return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0;
}

const filter& filter_for(interpolation mode) {
  static const filter box{box_weight, 0.5};
  static const filter bilinear{bilinear_weight, 1.0};
  static const filter hamming{hamming_weight, 1.0};
  static const filter bicubic{bicubic_weight, 2.0};
  static const filter lanczos{lanczos_weight, 3.0};
  switch (mode) {
  case interpolation::box: return box;
  case interpolation::bilinear: return bilinear;
  case interpolation::hamming: return hamming;
  case interpolation::bicubic: return bicubic;
  case interpolation::lanczos: return lanczos;
  case interpolation::nearest: break;
  }
  ACTORCH_FAIL("resize: no resampling filter for interpolation mode ", int(mode));
}

// The fixed-point weights of one pass: output pixel i reads count[i] input pixels from first[i]
// on, with weights[i * ksize ...].
struct taps {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

// Pillow's precompute_coeffs followed by normalize_coeffs_8bpc, for the input span [in0, in1)
// of an axis of in_size pixels mapped onto out_size pixels.
taps precompute_taps(int in_size, float in0, float in1, int out_size, const filter& f) {
  const double scale = double(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = f.support * filterscale;
  const double ss = 1.0 / filterscale;

  taps t;
  t.ksize = int(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out_size));
  t.count.resize(size_t(out_size));
  t.weights.assign(size_t(out_size) * size_t(t.ksize), 0);
  std::vector<double> k(size_t(t.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const int xmin = std::max(int(center - support + 0.5), 0);
    const int xmax = std::min(int(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[size_t(x)] = f.weight((double(x + xmin) - center + 0.5) * ss);
      ww += k[size_t(x)];
    }
    int32_t* w = &t.weights[size_t(xx) * size_t(t.ksize)];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[size_t(x)] / ww : k[size_t(x)];
      w[x] = int32_t(v < 0 ? -0.5 + v * (1 << precision_bits) : 0.5 + v * (1 << precision_bits));
    }
    t.first[size_t(xx)] = xmin;
    t.count[size_t(xx)] = std::max(xmax, 0);
  }
  return t;
}

inline uint8_t clip8(int32_t acc) {
  return uint8_t(std::clamp(acc >> precision_bits, int32_t(0), int32_t(255)));
}

// Horizontal pass: out's row y is input row row0 + y resampled along x. The channel sums stay in
// registers, spelled out per channel.
template <int C>
void resample_horizontal(const image& in, int64_t row0, const taps& t, image& out) {
  static_assert(C == 1 || C == 3);
  const int32_t* weights = t.weights.data();
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* src = in.row(row0 + y);
    uint8_t* dst = out.row(y);
    for (int64_t xx = 0; xx < out.width; ++xx, dst += C) {
      const int32_t* k = weights + xx * t.ksize;
      const uint8_t* s = src + int64_t(t.first[size_t(xx)]) * C;
      const int n = t.count[size_t(xx)];
      if constexpr (C == 3) {
        int32_t r = half_unit, g = half_unit, b = half_unit;
        for (int x = 0; x < n; ++x, s += 3) {
          r += int32_t(s[0]) * k[x];
          g += int32_t(s[1]) * k[x];
          b += int32_t(s[2]) * k[x];
        }
        dst[0] = clip8(r);
        dst[1] = clip8(g);
        dst[2] = clip8(b);
      } else {
        int32_t l = half_unit;
        for (int x = 0; x < n; ++x)
          l += int32_t(s[x]) * k[x];
        dst[0] = clip8(l);
      }
    }
  }
}

// Vertical pass: out's row yy sums input rows first[yy] - row0 ... weighted. Integer sums are
// exact, so summing a whole row per tap gives Pillow's per-pixel sums.
void resample_vertical(const image& in, int64_t row0, const taps& t, image& out) {
  const int64_t n = out.row_bytes();
  std::vector<int32_t> acc(static_cast<size_t>(n));
  for (int64_t yy = 0; yy < out.height; ++yy) {
    const int32_t* k = t.weights.data() + yy * t.ksize;
    const int64_t first = t.first[size_t(yy)] - row0;
    std::fill(acc.begin(), acc.end(), half_unit);
    int32_t* __restrict a = acc.data();
    for (int y = 0; y < t.count[size_t(yy)]; ++y) {
      const uint8_t* __restrict s = in.row(first + y);
      const int32_t w = k[y];
      for (int64_t i = 0; i < n; ++i)
        a[i] += int32_t(s[i]) * w;
    }
    uint8_t* __restrict dst = out.row(yy);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = clip8(a[i]);
  }
}

// Geometry.c's COORD: a sampling position to a pixel index, -1 left of the image.
inline int coord(double v) {
  return v < 0.0 ? -1 : int(v);
}

// Nearest neighbour over the box, as ImagingScaleAffine steps it; misses come out as 0.
template <int C> void resize_nearest(const image& in, const std::array<float, 4>& box, image& out) {
  const double a0 = double(box[2] - box[0]) / double(out.width);
  const double a4 = double(box[3] - box[1]) / double(out.height);
  std::vector<int> xin(size_t(out.width));
  double xo = double(box[0]) + a0 * 0.5;
  for (int64_t x = 0; x < out.width; ++x) {
    const int xi = coord(xo);
    xin[size_t(x)] = (xi >= 0 && xi < in.width) ? xi : -1;
    xo += a0;
  }
  double yo = double(box[1]) + a4 * 0.5;
  for (int64_t y = 0; y < out.height; ++y) {
    const int yi = coord(yo);
    uint8_t* dst = out.row(y);
    if (yi >= 0 && yi < in.height) {
      const uint8_t* src = in.row(yi);
      for (int64_t x = 0; x < out.width; ++x) {
        const int xi = xin[size_t(x)];
        for (int c = 0; c < C; ++c)
          dst[x * C + c] = xi >= 0 ? src[int64_t(xi) * C + c] : 0;
      }
    } else {
      std::memset(dst, 0, size_t(out.row_bytes()));
    }
    yo += a4;
  }
}

// Pillow's ImagingCrop: the corners (x0, y0) and (x1, y1), outside parts 0.
image crop_corners(const image& in, int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
  image out(std::max<int64_t>(y1 - y0, 0), std::max<int64_t>(x1 - x0, 0), in.channels);
  const int64_t cx0 = std::max<int64_t>(x0, 0), cx1 = std::min(x1, in.width);
  const int64_t cy0 = std::max<int64_t>(y0, 0), cy1 = std::min(y1, in.height);
  if (x0 < 0 || y0 < 0 || x1 > in.width || y1 > in.height)
    std::fill_n(out.pixels.get(), size_t(out.bytes()), uint8_t(0));
  if (cx1 <= cx0)
    return out;
  for (int64_t y = cy0; y < cy1; ++y)
    std::memcpy(out.row(y - y0) + (cx0 - x0) * in.channels, in.row(y) + cx0 * in.channels,
                size_t((cx1 - cx0) * in.channels));
  return out;
}

image resample_with(const image& in, int out_w, int out_h, const filter& f,
                    const std::array<float, 4>& box) {
  const bool need_horizontal = out_w != in.width || box[0] != 0 || box[2] != float(out_w);
  const bool need_vertical = out_h != in.height || box[1] != 0 || box[3] != float(out_h);
  const taps th = precompute_taps(int(in.width), box[0], box[2], out_w, f);
  const taps tv = precompute_taps(int(in.height), box[1], box[3], out_h, f);
  const int64_t ybox_first = tv.first.front();
  const int64_t ybox_last = int64_t(tv.first.back()) + tv.count.back();

  image horizontal;
  const image* src = &in;
  int64_t row0 = 0;
  if (need_horizontal) {
    horizontal = image(ybox_last - ybox_first, out_w, in.channels);
    if (in.channels == 3)
      resample_horizontal<3>(in, ybox_first, th, horizontal);
    else
      resample_horizontal<1>(in, ybox_first, th, horizontal);
    src = &horizontal;
    row0 = ybox_first;
  }
  if (need_vertical) {
    image out(out_h, src->width, in.channels);
    resample_vertical(*src, row0, tv, out);
    return out;
  }
  return need_horizontal ? std::move(horizontal) : clone(in);
}

template <int C> image hflip_impl(const image& in) {
  image out(in.height, in.width, C);
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int64_t x = 0; x < in.width; ++x)
      for (int c = 0; c < C; ++c)
        dst[x * C + c] = src[(in.width - 1 - x) * C + c];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Colour

// Convert.c's L24: ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline uint8_t luma(const uint8_t* rgb) {
  return uint8_t(
      (uint32_t(rgb[0]) * 19595 + uint32_t(rgb[1]) * 38470 + uint32_t(rgb[2]) * 7471 + 0x8000) >>
      16);
}

inline uint8_t clip8_int(int v) {
  return uint8_t(v <= 0 ? 0 : v < 256 ? v : 255);
}

// Convert.c's rgb2hsv_row (after colorsys.py), with its float and double steps.
void rgb_to_hsv(const uint8_t* rgb, uint8_t* hsv) {
  const uint8_t r = rgb[0], g = rgb[1], b = rgb[2];
  const uint8_t maxc = std::max(r, std::max(g, b));
  const uint8_t minc = std::min(r, std::min(g, b));
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = 0;
    hsv[1] = 0;
    return;
  }
  const float cr = float(maxc - minc);
  const float s = cr / float(maxc);
  const float rc = float(maxc - r) / cr;
  const float gc = float(maxc - g) / cr;
  const float bc = float(maxc - b) / cr;
  float h;
  if (r == maxc)
    h = bc - gc;
  else if (g == maxc)
    h = float(2.0 + double(rc) - double(bc));
  else
    h = float(4.0 + double(gc) - double(rc));
  h = float(std::fmod(double(h) / 6.0 + 1.0, 1.0));
  hsv[0] = clip8_int(int(double(h) * 255.0));
  hsv[1] = clip8_int(int(double(s) * 255.0));
}

// Convert.c's hsv2rgb (after colorsys.py), with its float and double steps.
void hsv_to_rgb(const uint8_t* hsv, uint8_t* rgb) {
  const uint8_t h = hsv[0], s = hsv[1], v = hsv[2];
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const int i = int(std::floor(double(float(h)) * 6.0 / 255.0));
  const float f = float(double(float(h)) * 6.0 / 255.0 - double(float(i)));
  const float fs = float(double(float(s)) / 255.0);
  const double fv = double(float(v));
  const uint8_t p = clip8_int(int(std::round(fv * (1.0 - double(fs)))));
  const uint8_t q = clip8_int(int(std::round(fv * (1.0 - double(fs * f)))));
  const uint8_t t = clip8_int(int(std::round(fv * (1.0 - double(fs) * (1.0 - double(f))))));
  switch (i % 6) {
  case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
  case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
  case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
  case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
  case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
  default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
  }
}

// Convert.c's MULDIV255: a * b / 255, rounded, in shifts.
inline int muldiv255(int a, int b) {
  const int tmp = a * b + 128;
  return ((tmp >> 8) + tmp) >> 8;
}

image filled(int64_t h, int64_t w, int64_t c, uint8_t value) {
  image out(h, w, c);
  std::fill_n(out.pixels.get(), size_t(out.bytes()), value);
  return out;
}

} // namespace

image clone(const image& in) {
  image out(in.height, in.width, in.channels);
  if (in.bytes() > 0)
    std::memcpy(out.pixels.get(), in.pixels.get(), size_t(in.bytes()));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Geometry

image resample(const image& in, int64_t out_w, int64_t out_h, interpolation mode,
               std::array<double, 4> box) {
  check_channels(in, "resize");
  ACTORCH_CHECK(in.width > 0 && in.height > 0, "resize: the input image is empty (", in.width, "x",
                in.height, ")");
  ACTORCH_CHECK(out_w > 0 && out_h > 0, "resize: the output size must be positive but got ", out_w,
                "x", out_h);
  ACTORCH_CHECK(out_w <= INT_MAX && out_h <= INT_MAX, "resize: the output size ", out_w, "x", out_h,
                " exceeds Pillow's int range");
  for (double v : box)
    ACTORCH_CHECK(std::isfinite(v), "resize: the box (", box[0], ", ", box[1], ", ", box[2], ", ",
                  box[3], ") is not finite");
  // Pillow takes the box as C floats: every test and step below works on those.
  const std::array<float, 4> fbox = {float(box[0]), float(box[1]), float(box[2]), float(box[3])};
  ACTORCH_CHECK(fbox[0] >= 0 && fbox[1] >= 0, "resize: the box (", box[0], ", ", box[1], ", ",
                box[2], ", ", box[3], ") starts at a negative offset");
  ACTORCH_CHECK(fbox[2] <= float(in.width) && fbox[3] <= float(in.height), "resize: the box (",
                box[0], ", ", box[1], ", ", box[2], ", ", box[3], ") exceeds the image size ",
                in.width, "x", in.height);
  ACTORCH_CHECK(fbox[2] - fbox[0] >= 0 && fbox[3] - fbox[1] >= 0, "resize: the box (", box[0], ", ",
                box[1], ", ", box[2], ", ", box[3], ") has a negative size");

  // An integral box as large as the output is a crop, whatever the filter.
  if (fbox[0] - float(int(fbox[0])) == 0 && fbox[2] - fbox[0] == float(out_w) &&
      fbox[1] - float(int(fbox[1])) == 0 && fbox[3] - fbox[1] == float(out_h))
    return crop_corners(in, int(fbox[0]), int(fbox[1]), int(fbox[2]), int(fbox[3]));

  if (mode == interpolation::nearest) {
    image out(out_h, out_w, in.channels);
    if (in.channels == 3)
      resize_nearest<3>(in, fbox, out);
    else
      resize_nearest<1>(in, fbox, out);
    return out;
  }
  return resample_with(in, int(out_w), int(out_h), filter_for(mode), fbox);
}

image resample(const image& in, int64_t out_w, int64_t out_h, interpolation mode) {
  return resample(in, out_w, out_h, mode, {0.0, 0.0, double(in.width), double(in.height)});
}

image crop(const image& in, int64_t left, int64_t top, int64_t width, int64_t height) {
  check_channels(in, "crop");
  ACTORCH_CHECK(width >= 0 && height >= 0, "crop: the size must not be negative but got ", width,
                "x", height, " at (", left, ", ", top, ")");
  return crop_corners(in, left, top, left + width, top + height);
}

image hflip(const image& in) {
  check_channels(in, "hflip");
  return in.channels == 3 ? hflip_impl<3>(in) : hflip_impl<1>(in);
}

image vflip(const image& in) {
  check_channels(in, "vflip");
  image out(in.height, in.width, in.channels);
  for (int64_t y = 0; y < in.height; ++y)
    std::memcpy(out.row(y), in.row(in.height - 1 - y), size_t(in.row_bytes()));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Colour

image to_grayscale(const image& rgb) {
  ACTORCH_CHECK(rgb.channels == 3, "to_grayscale: expected an RGB (3 channels) image but got ",
                rgb.channels, " channels");
  image out(rgb.height, rgb.width, 1);
  const uint8_t* src = rgb.pixels.get();
  uint8_t* dst = out.pixels.get();
  for (int64_t i = 0, n = rgb.height * rgb.width; i < n; ++i)
    dst[i] = luma(src + 3 * i);
  return out;
}

image gray_to_rgb(const image& l) {
  ACTORCH_CHECK(l.channels == 1, "gray_to_rgb: expected an L (1 channel) image but got ",
                l.channels, " channels");
  image out(l.height, l.width, 3);
  const uint8_t* src = l.pixels.get();
  uint8_t* dst = out.pixels.get();
  for (int64_t i = 0, n = l.height * l.width; i < n; ++i)
    dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
  return out;
}

image blend(const image& a, const image& b, float alpha) {
  check_channels(a, "blend");
  ACTORCH_CHECK(a.height == b.height && a.width == b.width && a.channels == b.channels,
                "blend: the images differ in shape: ", a.height, "x", a.width, "x", a.channels,
                " vs ", b.height, "x", b.width, "x", b.channels);
  ACTORCH_CHECK(!std::isnan(alpha), "blend: alpha is NaN");
  if (alpha == 0.0f)
    return clone(a);
  if (alpha == 1.0f)
    return clone(b);
  image out(a.height, a.width, a.channels);
  const uint8_t* pa = a.pixels.get();
  const uint8_t* pb = b.pixels.get();
  uint8_t* dst = out.pixels.get();
  const int64_t n = a.bytes();
  // Blend.c: in1 + alpha * (in2 - in1) in float, truncated; clipped only when extrapolating.
  if (alpha >= 0 && alpha <= 1.0f) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = uint8_t(float(pa[i]) + alpha * float(int(pb[i]) - int(pa[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float v = float(pa[i]) + alpha * float(int(pb[i]) - int(pa[i]));
      dst[i] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : uint8_t(v);
    }
  }
  return out;
}

image adjust_brightness(const image& img, double factor) {
  check_channels(img, "adjust_brightness");
  return blend(filled(img.height, img.width, img.channels, 0), img, float(factor));
}

image adjust_contrast(const image& img, double factor) {
  check_channels(img, "adjust_contrast");
  const int64_t n = img.height * img.width;
  ACTORCH_CHECK(n > 0, "adjust_contrast: the image is empty (", img.width, "x", img.height, ")");
  // ImageStat's mean of convert("L"): an exact integer sum over the count, then int(mean + 0.5).
  uint64_t sum = 0;
  const uint8_t* src = img.pixels.get();
  for (int64_t i = 0; i < n; ++i)
    sum += img.channels == 3 ? luma(src + 3 * i) : src[i];
  const int mean = int(double(sum) / double(n) + 0.5);
  return blend(filled(img.height, img.width, img.channels, uint8_t(mean)), img, float(factor));
}

image adjust_saturation(const image& img, double factor) {
  check_channels(img, "adjust_saturation");
  const image degenerate = img.channels == 3 ? gray_to_rgb(to_grayscale(img)) : clone(img);
  return blend(degenerate, img, float(factor));
}

image adjust_hue(const image& img, double hue_factor) {
  ACTORCH_CHECK(-0.5 <= hue_factor && hue_factor <= 0.5, "adjust_hue: hue_factor (", hue_factor,
                ") is not in [-0.5, 0.5]");
  check_channels(img, "adjust_hue");
  if (img.channels == 1)
    return clone(img);
  // numpy's np.uint8(hue_factor * 255): truncate toward zero, then wrap modulo 256.
  const uint8_t shift = uint8_t(int(hue_factor * 255));
  image out(img.height, img.width, 3);
  const uint8_t* src = img.pixels.get();
  uint8_t* dst = out.pixels.get();
  for (int64_t i = 0, n = img.height * img.width; i < n; ++i) {
    uint8_t hsv[3];
    rgb_to_hsv(src + 3 * i, hsv);
    hsv[0] = uint8_t(hsv[0] + shift);
    hsv_to_rgb(hsv, dst + 3 * i);
  }
  return out;
}

image cmyk_to_rgb(const uint8_t* cmyk, int64_t h, int64_t w) {
  ACTORCH_CHECK(h >= 0 && w >= 0, "cmyk_to_rgb: the size must not be negative but got ", h, "x", w);
  ACTORCH_CHECK(cmyk != nullptr || h * w == 0, "cmyk_to_rgb: no pixels for a ", h, "x", w,
                " image");
  image out(h, w, 3);
  uint8_t* dst = out.pixels.get();
  for (int64_t i = 0, n = h * w; i < n; ++i) {
    const uint8_t* p = cmyk + 4 * i;
    const int nk = 255 - p[3];
    for (int c = 0; c < 3; ++c)
      dst[3 * i + c] = clip8_int(nk - muldiv255(p[c], nk));
  }
  return out;
}

} // namespace actorch::data::vision
