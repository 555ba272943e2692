// torchvision's transforms on images, as torchvision 0.14 runs them on PIL images (the path its
// ImageFolder takes): each step acts on a decoded image until ToTensor, then on the tensor. A
// list of steps is what Compose holds; load() decodes a file and runs the steps, decoding only
// the crop at a reduced scale when the steps allow it (Note [Fused image path]). Random draws
// come from batch_generator() (Note [Batch randomness]), in torchvision's order and ranges.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/data/transforms.hpp"
#include "core/data/vision/image.hpp"
#include "core/data/vision/pixels.hpp"
#include "core/tensor.hpp"

namespace actorch::data::vision {

/// RandomResizedCrop: a crop of random area (a `scale` fraction of the image's) and aspect ratio
/// (log-uniform in `ratio`), resized to `size`.
struct random_resized_crop {
  transforms::crop_size size;
  std::array<double, 2> scale{0.08, 1.0};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  interpolation mode = interpolation::bilinear;
};
/// Resize: {h, w}, or {s} for the shorter edge (transforms::resized_size's rule).
struct resize {
  std::vector<int64_t> size;
  interpolation mode = interpolation::bilinear;
  std::optional<int64_t> max_size = std::nullopt;
};
struct center_crop {
  transforms::crop_size size;
};
struct random_crop {
  transforms::crop_size size;
  transforms::random_crop_options options = {};
};
struct random_horizontal_flip {
  double p = 0.5;
};
struct random_vertical_flip {
  double p = 0.5;
};
/// ColorJitter's factor ranges after torchvision's _check_input: brightness, contrast and
/// saturation [max(0, 1 - v), 1 + v] for a number v, hue [-v, v]; unset when the range is the
/// identity (no draw is made for it, as torchvision's None).
struct color_jitter {
  std::optional<std::array<double, 2>> brightness, contrast, saturation, hue;
};
/// torchvision's ColorJitter(brightness, contrast, saturation, hue) for numbers.
color_jitter make_color_jitter(double brightness, double contrast, double saturation, double hue);
/// One ColorJitter argument as torchvision's _check_input takes it: a number v becomes
/// [center - v, center + v] (its low end clipped at 0 for all but hue), a pair is taken as it
/// is; either must lie within [0, inf) (hue: [-0.5, 0.5]), else actorch::error naming `name`.
/// nullopt for the identity range.
std::optional<std::array<double, 2>> color_jitter_range(const char* name,
                                                        std::optional<double> number,
                                                        std::array<double, 2> range = {});
struct grayscale {
  int64_t num_output_channels = 1;
};
struct to_tensor {};
struct normalize {
  std::vector<double> mean, std;
};
/// A transform of tensors only (a Lambda, or one of core/data/transforms.hpp): after ToTensor
/// it gets the tensor; before, the image as a uint8 (H, W, C) tensor, and its result is a
/// tensor from then on.
struct tensor_step {
  transforms::transform fn;
  std::string name = "Lambda";
};

using step =
    std::variant<random_resized_crop, resize, center_crop, random_crop, random_horizontal_flip,
                 random_vertical_flip, color_jitter, grayscale, to_tensor, normalize, tensor_step>;

/// torchvision's class name of the step ("RandomResizedCrop"), for messages.
const char* step_name(const step& s);
/// Checks a step's arguments as torchvision's constructor does, throwing actorch::error naming
/// the transform and the argument.
void check_step(const step& s);

/// What a sample's image is while the steps run: a decoded image until ToTensor (or a
/// tensor_step), a tensor after.
using image_or_tensor = std::variant<image, tensor>;

/// Runs the steps one after another (Compose). A tensor input takes every step's tensor form
/// (core/data/transforms.hpp's; ColorJitter and Grayscale have none and say so).
image_or_tensor run_steps(std::span<const step> steps, image_or_tensor x);
/// The steps' result as a tensor: an image becomes its uint8 (H, W, C) tensor.
tensor result_tensor(image_or_tensor x);
/// The steps as one tensor transform (for TransformedDataset and tensors from Python).
transforms::transform tensor_transform(std::vector<step> steps);

/// Decodes a JPEG or PNG file's bytes (`name` names it in errors) and runs the steps; the
/// result is a tensor (a uint8 (H, W, C) image when no step makes it a float tensor). With
/// `fuse`, a JPEG whose steps start with RandomResizedCrop or Resize is decoded at the smallest
/// DCT scale that keeps the crop at least as large as its output, and a RandomResizedCrop
/// decodes only its crop; a tail of flips, ToTensor and Normalize writes the output in one
/// pass. The random draws are the same either way (Note [Fused image path]).
tensor load(const std::vector<step>& steps, const uint8_t* data, size_t size,
            const std::string& name, bool fuse = true);

/// A decoded image as a uint8 (H, W, C) tensor (a copy) and back (C = 1 or 3, any strides).
tensor image_to_tensor(const image& img);
image image_from_tensor(const tensor& t, const char* who);

/// torchvision's functional forms on images, for checks against torchvision with fixed draws.
struct crop_box {
  int64_t top, left, height, width;
};
/// RandomResizedCrop.get_params for an image of `height` x `width`: up to 10 draws of area and
/// ratio, then the central crop of the ratio clamped into `ratio`.
crop_box random_resized_crop_params(int64_t height, int64_t width, std::array<double, 2> scale,
                                    std::array<double, 2> ratio);
/// F.crop: the box, areas outside the image read as 0.
image crop(const image& img, const crop_box& box);
/// F.center_crop: pads with 0 around an image smaller than the crop first.
image center_crop_image(const image& img, transforms::crop_size size);
/// F.resize with torchvision's output-size rule.
image resize_image(const image& img, const std::vector<int64_t>& size, interpolation mode,
                   std::optional<int64_t> max_size = std::nullopt);
/// F.resized_crop: crop, then resize to `size`.
image resized_crop(const image& img, const crop_box& box, transforms::crop_size size,
                   interpolation mode);
/// F.pad with a constant: left, top, right, bottom.
image pad(const image& img, const std::array<int64_t, 4>& ltrb, uint8_t fill);
/// F.rgb_to_grayscale: convert("L"), then replicated to 3 channels when asked.
image rgb_to_grayscale(const image& img, int64_t num_output_channels);
/// F.to_tensor: float32 (C, H, W) in [0, 1].
tensor image_to_float(const image& img);

} // namespace actorch::data::vision
