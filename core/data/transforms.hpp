// Per-sample transforms, as torchvision.transforms: compose, to_tensor, normalize, random_crop,
// center_crop, random_horizontal_flip, resize and lambda_, and transformed_dataset, which applies
// them in get(): inside the loader's dataset workers, in parallel, before collate. Random
// transforms draw from batch_generator() (see Note [Batch randomness] in worker_info.hpp), so a
// loader yields the same augmented batches whatever num_workers is.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/tensor.hpp"

namespace actorch::data::transforms {

/// One per-sample transform: an image tensor in, an image tensor out. Images are (..., C, H, W)
/// after to_tensor; the crops and the flip act on the last two dims.
using transform = std::function<tensor(const tensor&)>;

/// Compose: the transforms one after another, in the order given.
transform compose(std::vector<transform> transforms);

/// ToTensor: a uint8 image (H, W, C) or (H, W) becomes float32 (C, H, W) scaled to [0, 1]
/// (divided by 255); an image of another dtype is only laid out as (C, H, W), unscaled, as
/// torchvision does with a non-uint8 array.
transform to_tensor();
tensor to_tensor(const tensor& image);

/// Normalize: (x - mean[c]) / std[c] for each channel c of a floating (..., C, H, W) tensor.
/// mean and std hold C values, or one value for every channel. @pre no std is 0.
transform normalize(std::vector<double> mean, std::vector<double> std);
tensor normalize(const tensor& image, const std::vector<double>& mean,
                 const std::vector<double>& std);

/// The crop sizes (height, width); one value means a square.
struct crop_size {
  int64_t height;
  int64_t width;
  crop_size(int64_t size) : height(size), width(size) {} // NOLINT: RandomCrop(32)
  crop_size(int64_t h, int64_t w) : height(h), width(w) {}
};

struct random_crop_options {
  /// Border added before cropping: {} none, {p} all sides, {left/right, top/bottom}, or
  /// {left, top, right, bottom}, as torchvision's padding.
  std::vector<int64_t> padding = {};
  /// Pad an image smaller than the crop up to its size first (torchvision's pad_if_needed).
  bool pad_if_needed = false;
  /// The value of padded pixels (padding_mode "constant").
  double fill = 0;
};

/// torchvision's padding argument as (left, top, right, bottom): {} none, {p} every side,
/// {left/right, top/bottom}, or {left, top, right, bottom}. Throws actorch::error naming `who`
/// for another number of values or a negative one.
std::array<int64_t, 4> padding_ltrb(const std::vector<int64_t>& padding, const char* who);

/// RandomCrop: pads as asked, then crops `size` at an offset drawn uniformly from
/// batch_generator() (top first, then left, as torchvision draws them). Throws when the padded
/// image is smaller than the crop, naming both sizes.
transform random_crop(crop_size size, random_crop_options opts = {});

/// CenterCrop: the centre `size` of the image, the offset rounded half to even as torchvision's
/// round((H - h) / 2); an image smaller than the crop is padded with zeros around it first.
transform center_crop(crop_size size);

/// RandomHorizontalFlip: reverses the last dim with probability p, drawn from batch_generator().
transform random_horizontal_flip(double p = 0.5);
/// hflip: reverses the last dim (a contiguous copy).
tensor hflip(const tensor& image);

struct resize_options {
  /// The longer edge's bound when `size` gives the shorter edge only (torchvision's max_size):
  /// an image whose longer edge would pass it is resized so that the longer edge is max_size.
  std::optional<int64_t> max_size = std::nullopt;
  /// Filter the image when shrinking it (torchvision's antialias, True by default since its
  /// 0.17, and what PIL does); false is F.interpolate's plain bilinear sampling.
  bool antialias = true;
};
/// Resize, bilinear: `size` {h, w} resizes to exactly that; {s} matches the shorter edge to s
/// and scales the longer one to int(s * long / short) (truncated, as torchvision computes it).
/// Acts on the last two dims of a floating or integer (..., H, W) image; an integer image is
/// interpolated in float and rounded half to even, as torchvision rounds before casting back.
transform resize(std::vector<int64_t> size, resize_options opts = {});
tensor resize(const tensor& image, const std::vector<int64_t>& size,
              const resize_options& opts = {});
/// The (height, width) resize() gives an h x w image (torchvision's output size rule).
std::pair<int64_t, int64_t> resized_size(int64_t h, int64_t w, const std::vector<int64_t>& size,
                                         std::optional<int64_t> max_size = std::nullopt);
/// Lambda: user code as a transform (named with a trailing underscore: `lambda` is a keyword).
transform lambda_(std::function<tensor(const tensor&)> fn);

/// A map-style dataset applying transforms in get(), as torchvision datasets' `transform` and
/// `target_transform`: for a tuple sample (image, target, ...), `transform` applies to element
/// 0 and `target_transform` (when given) to element 1, which must then be a tensor; a sample
/// that is a tensor gets `transform`. Safe to call concurrently as long as the transforms are.
class transformed_dataset : public dataset {
public:
  transformed_dataset(dataset_ptr dataset, transforms::transform image_transform,
                      transforms::transform target_transform = {});
  int64_t size() const override { return dataset_->size(); }
  sample get(int64_t index) const override;
  const dataset_ptr& dataset() const { return dataset_; }

private:
  dataset_ptr dataset_;
  transforms::transform transform_;
  transforms::transform target_transform_;
};

} // namespace actorch::data::transforms
