// Pixel operations on decoded images that reproduce Pillow 9.4 bit for bit on RGB and L images:
// resize, crop, flips, mode conversions, blend and the colour adjustments torchvision 0.14's
// functional_pil builds on them. The image path's transforms (after decode, before ToTensor)
// call these, so a pipeline gives the bytes a PyTorch loader with PIL images would give.
#pragma once

#include <array>
#include <cstdint>

#include "core/data/vision/image.hpp"

namespace actorch::data::vision {

/// Resampling filters, named as torchvision's InterpolationMode (PIL's NEAREST, BILINEAR,
/// BICUBIC, BOX, HAMMING, LANCZOS).
enum class interpolation { nearest, bilinear, bicubic, box, hamming, lanczos };

/// resample: PIL's `Image.resize((out_w, out_h), resample, box=(x0, y0, x1, y1))` with
/// reducing_gap=None. The box is the source region in input coordinates (taken as floats, as Pillow
/// does), within (0, 0, width, height); nearest samples pixel centres, the others use Pillow's
/// separable fixed-point resampling (see Note [Pillow's resampling] in pixels.cpp).
/// @pre out_w, out_h > 0; in has 1 or 3 channels.
image resample(const image& in, int64_t out_w, int64_t out_h, interpolation mode,
               std::array<double, 4> box);

/// resample over the whole image: box = (0, 0, width, height).
image resample(const image& in, int64_t out_w, int64_t out_h, interpolation mode);

/// A copy (PIL's Image.copy()).
image clone(const image& in);

/// PIL's `img.crop((left, top, left + width, top + height))`: the parts of the box outside the
/// image come out as 0. @pre width, height >= 0.
image crop(const image& in, int64_t left, int64_t top, int64_t width, int64_t height);

/// PIL's transpose(FLIP_LEFT_RIGHT): column x becomes column width - 1 - x.
image hflip(const image& in);

/// PIL's transpose(FLIP_TOP_BOTTOM): row y becomes row height - 1 - y.
image vflip(const image& in);

/// PIL's convert("L") from RGB: ITU-R 601-2 luma in 16-bit fixed point, rounded.
/// @pre rgb has 3 channels.
image to_grayscale(const image& rgb);

/// PIL's convert("RGB") from L: the grey value in all three channels. @pre l has 1 channel.
image gray_to_rgb(const image& l);

/// PIL's Image.blend(a, b, alpha): a + alpha * (b - a) per byte, truncated, and clipped to
/// [0, 255] when alpha lies outside [0, 1]. @pre a and b have the same shape.
image blend(const image& a, const image& b, float alpha);

/// torchvision's adjust_brightness on a PIL image (ImageEnhance.Brightness): blend with black.
image adjust_brightness(const image& img, double factor);

/// torchvision's adjust_contrast on a PIL image (ImageEnhance.Contrast): blend with a grey image
/// whose value is the rounded mean of the image's luma.
image adjust_contrast(const image& img, double factor);

/// torchvision's adjust_saturation on a PIL image (ImageEnhance.Color): blend with the image's
/// grey version.
image adjust_saturation(const image& img, double factor);

/// torchvision's adjust_hue on a PIL image: to HSV, hue + uint8(hue_factor * 255) modulo 256,
/// back to RGB. An L image comes back unchanged, as torchvision returns it.
/// @pre -0.5 <= hue_factor <= 0.5.
image adjust_hue(const image& img, double hue_factor);

/// PIL's convert("RGB") of a CMYK image given as h * w interleaved C, M, Y, K bytes.
image cmyk_to_rgb(const uint8_t* cmyk, int64_t h, int64_t w);

} // namespace actorch::data::vision
