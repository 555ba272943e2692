// Image decoding for the data loader's workers: JPEG through libjpeg-turbo, PNG through libpng,
// both to the pixels PIL 9.4 gives for Image.open(path).convert("RGB") (torchvision's ImageFolder
// loader), plus the fused JPEG path that decodes only a crop at a DCT scale (RandomResizedCrop's
// fast path). Each call owns all of its codec state, so any number of workers decode at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/vision/image.hpp"

namespace actorch::data::vision {

enum class image_format { jpeg, png, unknown };

/// The format the first bytes announce: JPEG (FF D8 FF) or PNG (its 8-byte signature). The file
/// name plays no part, so a PNG saved as .jpg decodes as the PNG it is, as in PIL.
image_format sniff_format(const uint8_t* data, size_t size);

/// What a file's header says, read without decoding any pixels.
struct image_info {
  int64_t width = 0;
  int64_t height = 0;
  image_format format = image_format::unknown;
};

/// Reads the size from the header only (JPEG markers up to the first scan, or PNG's IHDR).
/// `name` is the file's path, for messages.
/// @throws actorch::error naming `name` for an unknown format or a corrupt or truncated header.
image_info read_image_info(const uint8_t* data, size_t size, const std::string& name);

/// Decodes a whole JPEG or PNG, chosen by content, to RGB exactly as PIL's
/// Image.open(name).convert("RGB"): grayscale replicated, alpha and transparency dropped (not
/// composited), palettes looked up, 16-bit samples cut to their high byte, except 16-bit
/// grayscale, which PIL opens as mode "I" and clips to 0..255 (values above 255 turn white).
/// @post the result has 3 channels.
/// @throws actorch::error naming `name` and the fault for a file that is not a JPEG or PNG, is
/// corrupt, or is truncated (PIL's "image file is truncated"; libjpeg's grey padding is refused).
image decode_image(const uint8_t* data, size_t size, const std::string& name);

/// A crop of a JPEG decoded at DCT scale 1/scale_denom, in the coordinates of the scaled image
/// (whose size jpeg_scaled_size gives).
struct jpeg_region {
  int64_t left = 0;
  int64_t top = 0;
  int64_t width = 0;
  int64_t height = 0;
  int scale_denom = 1; // 1, 2, 4 or 8
};

/// The size (width, height) libjpeg decodes a width x height JPEG to at scale 1/scale_denom:
/// each side divided and rounded up, as PIL's draft() computes it.
/// @pre scale_denom is 1, 2, 4 or 8.
std::pair<int64_t, int64_t> jpeg_scaled_size(int64_t width, int64_t height, int scale_denom);

/// Decodes only `region` of a JPEG, at DCT scale 1/region.scale_denom: the rows above it are
/// skipped, the rows below it never decoded, and only the iMCU columns around it are decoded
/// (jpeg_crop_scanline). The result is exactly region.width x region.height: the extra columns
/// libjpeg decodes to reach iMCU boundaries, and a margin kept so that chroma upsampling at the
/// crop's sides sees its true neighbours, are cut away here. Its pixels equal PIL's
/// im.draft("RGB", size) at the same scale followed by crop(); see Note [Region decode exactness]
/// in decode.cpp. Grayscale and CMYK/YCCK JPEGs come out as RGB, as in decode_image. Data
/// below the region is never read, so a baseline file cut there still decodes (a progressive
/// one is read whole by libjpeg and is refused as in decode_image).
/// @pre 0 <= left, 0 < width, left + width <= the scaled width; likewise top and height.
/// @throws actorch::error naming `name` for a non-JPEG, a corrupt or truncated file, or a region
/// outside the scaled image.
image decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name,
                         const jpeg_region& region);

/// The whole content of the file at `path`.
/// @throws actorch::error naming `path` and the system's reason when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path);

} // namespace actorch::data::vision
