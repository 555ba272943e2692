// decode: JPEG and PNG bytes to the RGB image PIL 9.4 gives for Image.open(path).convert("RGB"),
// for the dataset workers. libjpeg-turbo and libpng decode; this file sets them up as PIL's own
// decoders do, turns their errors into actorch::error, and converts rows to RGB with PIL's rules
// (Unpack.c, Convert.c) where the libraries' output differs from them.
#include "core/data/vision/decode.hpp"

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "core/serialize/file_io.hpp"

namespace actorch::data::vision {

// Note [Codec errors and longjmp]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// libjpeg and libpng are C: on a fatal error they call a handler that must not return. Ours
// copy the library's message into the job and longjmp back to a setjmp in a small C-like "phase"
// function (jpeg_header_phase, png_pixels_phase, ...). A phase holds only locals without
// destructors, and between it and the handler there are only C frames, so the jump skips no
// destructor. Everything owned (codec structs, pixel buffers) belongs to the caller's objects:
// the phase returns false, the caller throws actorch::error, and unwinding frees it all.
// Allocations happen in the caller between phases, never inside one, so a bad_alloc never
// crosses C frames either.

namespace {

// PIL refuses images of more than twice Image.MAX_IMAGE_PIXELS (DecompressionBombError). We do
// the same, which also stops a corrupt header from asking for gigabytes.
constexpr int64_t max_pixels = 2 * int64_t(89478485);

const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

std::string leading_bytes(const uint8_t* data, size_t size) {
  return to_hex(data, std::min<size_t>(size, 8), ' ');
}

[[noreturn]] void fail_unknown(const char* op, const std::string& name, const uint8_t* data,
                               size_t size) {
  if (size == 0)
    ACTORCH_FAIL(op, ": ", name, ": not a JPEG or PNG image (the file is empty)");
  ACTORCH_FAIL(op, ": ", name, ": not a JPEG or PNG image (starts with bytes ",
               leading_bytes(data, size), ")");
}

void check_pixels(const char* op, const std::string& name, int64_t width, int64_t height) {
  ACTORCH_CHECK(width * height <= max_pixels, op, ": ", name, ": image of ", width, "x", height,
                " = ", width * height, " pixels is over PIL's limit of ", max_pixels,
                " (DecompressionBombError)");
}

// ---- JPEG -----------------------------------------------------------------------------------

// One decompression, from header to the last row wanted. See Note [Codec errors and longjmp].
struct jpeg_job {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  std::jmp_buf jump{};
  bool truncated = false; // the error is libjpeg's "Premature end of JPEG file"
  char message[JMSG_LENGTH_MAX] = {};

  jpeg_job();
  jpeg_job(const jpeg_job&) = delete;
  jpeg_job& operator=(const jpeg_job&) = delete;
  // Safe before jpeg_create_decompress too: the struct is zeroed, so there is nothing to free.
  ~jpeg_job() { jpeg_destroy_decompress(&cinfo); }
};

void jpeg_on_error(j_common_ptr c) {
  auto* job = static_cast<jpeg_job*>(c->client_data);
  (*c->err->format_message)(c, job->message);
  std::longjmp(job->jump, 1);
}

// libjpeg's warnings (level -1) are corrupt data it decodes through, as PIL does, silently;
// except running out of data, where libjpeg pads the rest with grey but PIL raises "image file
// is truncated". Trace messages (level >= 0) are ignored.
void jpeg_on_message(j_common_ptr c, int level) {
  if (level != -1 || c->err->msg_code != JWRN_JPEG_EOF)
    return;
  auto* job = static_cast<jpeg_job*>(c->client_data);
  job->truncated = true;
  (*c->err->format_message)(c, job->message);
  std::longjmp(job->jump, 1);
}

void jpeg_on_output(j_common_ptr) {}

jpeg_job::jpeg_job() {
  cinfo.err = jpeg_std_error(&err);
  err.error_exit = jpeg_on_error;
  err.emit_message = jpeg_on_message;
  err.output_message = jpeg_on_output;
  cinfo.client_data = this;
}

[[noreturn]] void fail_jpeg(const char* op, const std::string& name, const jpeg_job& job) {
  if (job.truncated)
    ACTORCH_FAIL(op, ": ", name, ": JPEG data is truncated (", job.message, ")");
  ACTORCH_FAIL(op, ": ", name, ": corrupt or unsupported JPEG (", job.message, ")");
}

// Phase 1: the markers up to the first scan; then the output colour space and DCT scale are set
// as PIL's decoder sets them (PIL keeps libjpeg's default islow DCT and fancy upsampling; its
// draft flag, which would change them, is always 0 from JpegImagePlugin) and the output size is
// computed. Grayscale is asked as RGB: libjpeg-turbo replicates the sample, as PIL's L->RGB.
bool jpeg_header_phase(jpeg_job& job, const uint8_t* data, size_t size, int scale_denom) {
  if (setjmp(job.jump))
    return false;
  j_decompress_ptr c = &job.cinfo;
  jpeg_create_decompress(c);
  jpeg_mem_src(c, data, static_cast<unsigned long>(size));
  jpeg_read_header(c, TRUE);
  if (c->num_components == 4)
    c->out_color_space = JCS_CMYK;
  else if (c->num_components == 1 || c->num_components == 3)
    c->out_color_space = JCS_RGB;
  c->scale_num = 1;
  c->scale_denom = static_cast<unsigned>(scale_denom);
  jpeg_calc_output_dimensions(c);
  return true;
}

// What phase 2 decodes: `width` x `height` pixels at (left, top) of the scaled image, out of
// the columns [crop_left, crop_left + crop_width) handed to jpeg_crop_scanline.
struct jpeg_plan {
  int64_t left = 0;
  int64_t top = 0;
  int64_t width = 0;
  int64_t height = 0;
  int64_t crop_left = 0;
  int64_t crop_width = 0; // equal to the full output width: no crop
  int components = 3;     // samples per decoded pixel: 3 (RGB) or 4 (CMYK)
};

// Note [Adobe CMYK]
// ~~~~~~~~~~~~~~~~~
// PIL opens every 4-component JPEG as CMYK with rawmode "CMYK;I" (JpegImagePlugin "assume adobe
// conventions"), which inverts each sample, and convert("RGB") then applies Convert.c's cmyk2rgb:
// with C', K' the inverted samples, R = (255 - K') - MULDIV255(C', 255 - K'), MULDIV255(a, b) =
// (t = a*b + 128, ((t >> 8) + t) >> 8). In terms of the decoded samples c and k (C' = 255 - c,
// 255 - K' = k): R = k - MULDIV255(255 - c, k), likewise G from m and B from y. libjpeg has
// already turned YCCK into CMYK.
uint8_t muldiv255(int a, int b) {
  int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void cmyk_row_to_rgb(const uint8_t* in, int64_t width, uint8_t* out) {
  for (int64_t x = 0; x < width; ++x, in += 4, out += 3) {
    int k = in[3];
    out[0] = static_cast<uint8_t>(k - muldiv255(255 - in[0], k));
    out[1] = static_cast<uint8_t>(k - muldiv255(255 - in[1], k));
    out[2] = static_cast<uint8_t>(k - muldiv255(255 - in[2], k));
  }
}

// Phase 2: start, narrow the columns, skip the rows above, read the rows wanted into `out` (RGB
// straight into its rows, or through `row`, one decoded row of the crop, to convert and cut it).
// The rows below are never decoded: the caller's jpeg_destroy_decompress aborts the rest, which
// also leaves trailing bytes after the last row unread, as PIL does (it ignores a failing
// jpeg_finish_decompress once all rows are out).
bool jpeg_pixels_phase(jpeg_job& job, const jpeg_plan& plan, image& out, uint8_t* row) {
  if (setjmp(job.jump))
    return false;
  j_decompress_ptr c = &job.cinfo;
  jpeg_start_decompress(c);
  int64_t first = plan.left; // column of the decoded row where the region starts
  if (plan.crop_width < int64_t(c->output_width)) {
    auto xoffset = static_cast<JDIMENSION>(plan.crop_left);
    auto width = static_cast<JDIMENSION>(plan.crop_width);
    jpeg_crop_scanline(c, &xoffset, &width); // moves xoffset left to an iMCU boundary
    first = plan.left - int64_t(xoffset);
  }
  if (plan.top > 0)
    jpeg_skip_scanlines(c, static_cast<JDIMENSION>(plan.top));
  bool direct = plan.components == 3 && first == 0 && plan.width == int64_t(c->output_width);
  for (int64_t y = 0; y < plan.height; ++y) {
    JSAMPROW dest = direct ? out.row(y) : row;
    if (jpeg_read_scanlines(c, &dest, 1) != 1) {
      std::snprintf(job.message, sizeof job.message, "no scanline %lld of %u",
                    static_cast<long long>(plan.top + y), c->output_height);
      return false;
    }
    if (direct)
      continue;
    if (plan.components == 4)
      cmyk_row_to_rgb(row + first * 4, plan.width, out.row(y));
    else
      std::memcpy(out.row(y), row + first * 3, size_t(plan.width * 3));
  }
  return true;
}

// Note [Region decode exactness]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jpeg_crop_scanline decodes from the iMCU boundary at or left of the requested column, and its
// fancy (smoothing) h2v1/h2v2 chroma upsampling treats the crop's left and right columns as the
// image's edges: a region column next to a crop edge would come out slightly different from a
// full decode. So the crop asks for crop_margin more columns on each side than the region (where
// the image has them) and the margin is cut away afterwards; the columns kept then see the same
// chroma neighbours as in a full decode. Rows need no margin: libjpeg-turbo's
// jpeg_skip_scanlines decodes the context rows that h2v2 upsampling reads. Both checked against
// PIL's draft() and crop() (margin 0 gave differences of up to 40 in the edge columns).
constexpr int64_t crop_margin = 1;

image decode_jpeg(const char* op, const uint8_t* data, size_t size, const std::string& name,
                  const jpeg_region* region) {
  jpeg_job job;
  int scale_denom = region != nullptr ? region->scale_denom : 1;
  if (!jpeg_header_phase(job, data, size, scale_denom))
    fail_jpeg(op, name, job);
  const jpeg_decompress_struct& c = job.cinfo;
  ACTORCH_CHECK(c.num_components == 1 || c.num_components == 3 || c.num_components == 4, op, ": ",
                name, ": JPEG with ", c.num_components,
                " components; only 1 (grayscale), 3 (YCbCr, RGB) or 4 (CMYK, YCCK) are decoded");
  check_pixels(op, name, c.image_width, c.image_height);

  const int64_t full_width = c.output_width;
  const int64_t full_height = c.output_height;
  jpeg_plan plan;
  plan.components = c.num_components == 4 ? 4 : 3;
  if (region == nullptr) {
    plan.width = full_width;
    plan.height = full_height;
  } else {
    const jpeg_region& r = *region;
    ACTORCH_CHECK(r.left >= 0 && r.top >= 0 && r.width > 0 && r.height > 0 &&
                      r.left + r.width <= full_width && r.top + r.height <= full_height,
                  op, ": ", name, ": region (left ", r.left, ", top ", r.top, ", width ", r.width,
                  ", height ", r.height, ") is not inside the ", full_width, "x", full_height,
                  " image that scale 1/", r.scale_denom, " gives");
    plan.left = r.left;
    plan.top = r.top;
    plan.width = r.width;
    plan.height = r.height;
  }
  // See Note [Region decode exactness].
  plan.crop_left = std::max<int64_t>(0, plan.left - crop_margin);
  plan.crop_width = std::min(full_width, plan.left + plan.width + crop_margin) - plan.crop_left;

  image out(plan.height, plan.width, 3);
  std::unique_ptr<uint8_t[]> row(new uint8_t[size_t(full_width * plan.components)]);
  if (!jpeg_pixels_phase(job, plan, out, row.get()))
    fail_jpeg(op, name, job);
  return out;
}

// ---- PNG ------------------------------------------------------------------------------------

// One read, its input the bytes in memory. See Note [Codec errors and longjmp].
struct png_job {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  int64_t height = 0;
  bool interlaced = false;
  bool reading_pixels = false;   // phase 2 has begun
  bool truncated = false;        // the read went past the end of the data
  bool ended_after_rows = false; // ... but only once every row was out; see png_read_bytes
  char message[256] = {};

  png_job() = default;
  png_job(const png_job&) = delete;
  png_job& operator=(const png_job&) = delete;
  ~png_job() {
    if (png != nullptr)
      png_destroy_read_struct(&png, &info, nullptr);
  }
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* job = static_cast<png_job*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof job->message, "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Whether png_read_row has handed out the last row of the last pass: the row counters have then
// moved past the end (the pass to 7 when libpng de-interlaces, the row to the height
// otherwise), and libpng is only reading on to the end of the zlib stream and of the IDAT chunk.
bool png_rows_done(png_structp png, const png_job& job) {
  if (!job.reading_pixels)
    return false;
  if (job.interlaced)
    return png_get_current_pass_number(png) >= 7;
  return int64_t(png_get_current_row_number(png)) >= job.height;
}

void png_read_bytes(png_structp png, png_bytep out, size_t count) {
  auto* job = static_cast<png_job*>(png_get_io_ptr(png));
  if (count > job->size - job->pos) {
    // PIL stops reading once its decoder has every row, so a file cut after the zlib stream
    // (in the last IDAT's CRC, or with no IEND) loads there; the rows are all in place, so
    // we keep them too. A cut inside the zlib stream is refused even where the rows it misses
    // are none (the 4-byte checksum and the end code): libpng reads the rest of the chunk
    // together with the last rows' data, so the two cannot be told apart here.
    if (png_rows_done(png, *job)) {
      job->ended_after_rows = true;
      png_longjmp(png, 1);
    }
    job->truncated = true;
    png_error(png, "read past the end of the data");
  }
  std::memcpy(out, job->data + job->pos, count);
  job->pos += count;
}

[[noreturn]] void fail_png(const char* op, const std::string& name, const png_job& job) {
  if (job.truncated)
    ACTORCH_FAIL(op, ": ", name, ": PNG data is truncated (the image needs more than the ",
                 job.size, " bytes there are)");
  ACTORCH_FAIL(op, ": ", name, ": corrupt or unsupported PNG (", job.message, ")");
}

// The rows libpng hands over after png_header_phase's transforms: samples of 8 bits, one
// per byte (1, 2 and 4-bit ones unpacked but not scaled), except 16-bit grayscale, kept whole
// (big-endian) because PIL clips rather than cuts it.
struct png_layout {
  int64_t width = 0;
  int64_t height = 0;
  int color_type = 0;
  int bit_depth = 0; // as stored
  size_t row_bytes = 0;
};

// Phase 1: the chunks up to the first IDAT, and the transforms set.
bool png_header_phase(png_job& job, png_layout& layout) {
  if (setjmp(png_jmpbuf(job.png)))
    return false;
  png_set_read_fn(job.png, &job, png_read_bytes);
  // PIL checks the CRC of every chunk before the image data, ancillary ones included (libpng
  // would only warn about those); it does not check IDAT's (see png_pixels_phase).
  png_set_crc_action(job.png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
  png_read_info(job.png, job.info);
  layout.width = png_get_image_width(job.png, job.info);
  layout.height = png_get_image_height(job.png, job.info);
  layout.color_type = png_get_color_type(job.png, job.info);
  layout.bit_depth = png_get_bit_depth(job.png, job.info);
  job.height = layout.height;
  job.interlaced = png_get_interlace_type(job.png, job.info) != PNG_INTERLACE_NONE;
  if (layout.bit_depth < 8)
    png_set_packing(job.png);
  // 16-bit samples keep their high byte, as PIL's "RGB;16B", "LA;16B" and "RGBA;16B" unpackers
  // do (png_set_strip_16 drops the low byte; png_set_scale_16 would round instead).
  if (layout.bit_depth == 16 && layout.color_type != PNG_COLOR_TYPE_GRAY)
    png_set_strip_16(job.png);
  png_set_interlace_handling(job.png);
  png_read_update_info(job.png, job.info);
  layout.row_bytes = png_get_rowbytes(job.png, job.info);
  return true;
}

// Phase 2: all rows, de-interlaced. IDAT's CRC goes unchecked, as in PIL (zlib's own checksum
// still is), and the chunks after the image data are not read: PIL ignores a missing IEND too.
bool png_pixels_phase(png_job& job, png_bytepp rows) {
  if (setjmp(png_jmpbuf(job.png)))
    return job.ended_after_rows;
  job.reading_pixels = true;
  png_set_crc_action(job.png, PNG_CRC_QUIET_USE, PNG_CRC_NO_CHANGE);
  png_read_image(job.png, rows);
  return true;
}

// The palette as PIL holds it: entries past the PLTE chunk's are grey ramp values (i, i, i),
// the start ImagingPaletteNew gives every palette. tRNS is ignored, as convert("RGB") does.
void png_palette(const png_job& job, uint8_t table[256 * 3]) {
  for (int i = 0; i < 256; ++i)
    table[3 * i] = table[3 * i + 1] = table[3 * i + 2] = static_cast<uint8_t>(i);
  png_colorp entries = nullptr;
  int count = 0;
  if (png_get_PLTE(job.png, job.info, &entries, &count) != 0) {
    for (int i = 0; i < std::min(count, 256); ++i) {
      table[3 * i] = entries[i].red;
      table[3 * i + 1] = entries[i].green;
      table[3 * i + 2] = entries[i].blue;
    }
  }
}

// One row of libpng's output to RGB, as PIL's unpacker and convert("RGB") would. Grayscale of 1,
// 2 or 4 bits scales to 0..255 (mode "1" maps 1 to 255; "L;2" and "L;4" multiply by 85 and 17);
// 16-bit grayscale is PIL's mode "I", whose convert("RGB") clips each value to 255.
void png_row_to_rgb(const png_layout& layout, const uint8_t* palette, const uint8_t* in,
                    uint8_t* out) {
  const int64_t n = layout.width;
  auto put_gray = [&](int64_t x, uint8_t v) { out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = v; };
  switch (layout.color_type) {
  case PNG_COLOR_TYPE_GRAY:
    if (layout.bit_depth == 16) {
      for (int64_t x = 0; x < n; ++x)
        put_gray(x, in[2 * x] != 0 ? 255 : in[2 * x + 1]);
    } else {
      const int scale = 255 / ((1 << layout.bit_depth) - 1);
      for (int64_t x = 0; x < n; ++x)
        put_gray(x, static_cast<uint8_t>(in[x] * scale));
    }
    break;
  case PNG_COLOR_TYPE_GRAY_ALPHA:
    for (int64_t x = 0; x < n; ++x)
      put_gray(x, in[2 * x]);
    break;
  case PNG_COLOR_TYPE_PALETTE:
    for (int64_t x = 0; x < n; ++x)
      std::memcpy(out + 3 * x, palette + 3 * in[x], 3);
    break;
  case PNG_COLOR_TYPE_RGB: std::memcpy(out, in, size_t(3 * n)); break;
  case PNG_COLOR_TYPE_RGB_ALPHA:
    for (int64_t x = 0; x < n; ++x)
      std::memcpy(out + 3 * x, in + 4 * x, 3);
    break;
  default: ACTORCH_INTERNAL_ASSERT(false, "PNG colour type ", layout.color_type);
  }
}

image decode_png(const char* op, const uint8_t* data, size_t size, const std::string& name) {
  png_job job;
  job.data = data;
  job.size = size;
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_on_error, png_on_warning);
  ACTORCH_CHECK(job.png != nullptr, op, ": ", name, ": cannot create a libpng reader");
  job.info = png_create_info_struct(job.png);
  ACTORCH_CHECK(job.info != nullptr, op, ": ", name, ": cannot create a libpng info struct");
  png_layout layout;
  if (!png_header_phase(job, layout))
    fail_png(op, name, job);
  check_pixels(op, name, layout.width, layout.height);

  image out(layout.height, layout.width, 3);
  // 8-bit RGB rows are already what we want: libpng writes them into the image itself.
  const bool direct = layout.color_type == PNG_COLOR_TYPE_RGB;
  std::unique_ptr<uint8_t[]> raw;
  if (!direct)
    raw.reset(new uint8_t[layout.row_bytes * size_t(layout.height)]);
  std::unique_ptr<png_bytep[]> rows(new png_bytep[size_t(layout.height)]);
  for (int64_t y = 0; y < layout.height; ++y)
    rows[y] = direct ? out.row(y) : raw.get() + size_t(y) * layout.row_bytes;
  if (!png_pixels_phase(job, rows.get()))
    fail_png(op, name, job);
  if (direct)
    return out;

  uint8_t palette[256 * 3];
  png_palette(job, palette);
  for (int64_t y = 0; y < layout.height; ++y)
    png_row_to_rgb(layout, palette, rows[y], out.row(y));
  return out;
}

uint32_t read_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// PNG's size without libpng: the IHDR chunk must come first, at byte 8.
image_info read_png_info(const uint8_t* data, size_t size, const std::string& name) {
  constexpr const char* op = "read_image_info";
  ACTORCH_CHECK(size >= 24, op, ": ", name, ": PNG data is truncated (", size,
                " bytes, its header needs 24)");
  ACTORCH_CHECK(read_be32(data + 8) == 13 && std::memcmp(data + 12, "IHDR", 4) == 0, op, ": ", name,
                ": corrupt PNG (no IHDR chunk after the signature)");
  const uint32_t width = read_be32(data + 16);
  const uint32_t height = read_be32(data + 20);
  ACTORCH_CHECK(width > 0 && height > 0 && width <= 0x7fffffffu && height <= 0x7fffffffu, op, ": ",
                name, ": corrupt PNG (IHDR gives a size of ", width, "x", height, ")");
  return image_info{int64_t(width), int64_t(height), image_format::png};
}

} // namespace

image_format sniff_format(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
    return image_format::jpeg;
  if (size >= 8 && std::memcmp(data, png_signature, 8) == 0)
    return image_format::png;
  return image_format::unknown;
}

image_info read_image_info(const uint8_t* data, size_t size, const std::string& name) {
  constexpr const char* op = "read_image_info";
  switch (sniff_format(data, size)) {
  case image_format::jpeg: {
    jpeg_job job;
    if (!jpeg_header_phase(job, data, size, 1))
      fail_jpeg(op, name, job);
    return image_info{int64_t(job.cinfo.image_width), int64_t(job.cinfo.image_height),
                      image_format::jpeg};
  }
  case image_format::png: return read_png_info(data, size, name);
  case image_format::unknown: break;
  }
  fail_unknown(op, name, data, size);
}

image decode_image(const uint8_t* data, size_t size, const std::string& name) {
  constexpr const char* op = "decode_image";
  switch (sniff_format(data, size)) {
  case image_format::jpeg: return decode_jpeg(op, data, size, name, nullptr);
  case image_format::png: return decode_png(op, data, size, name);
  case image_format::unknown: break;
  }
  fail_unknown(op, name, data, size);
}

std::pair<int64_t, int64_t> jpeg_scaled_size(int64_t width, int64_t height, int scale_denom) {
  ACTORCH_CHECK(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8,
                "jpeg_scaled_size: scale_denom must be 1, 2, 4 or 8, got ", scale_denom);
  // libjpeg's jdiv_round_up(width * scale_num, scale_denom) with scale_num 1.
  return {(width + scale_denom - 1) / scale_denom, (height + scale_denom - 1) / scale_denom};
}

image decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name,
                         const jpeg_region& region) {
  constexpr const char* op = "decode_jpeg_region";
  const int d = region.scale_denom;
  ACTORCH_CHECK(d == 1 || d == 2 || d == 4 || d == 8, op, ": ", name,
                ": scale_denom must be 1, 2, 4 or 8, got ", d);
  switch (sniff_format(data, size)) {
  case image_format::jpeg: return decode_jpeg(op, data, size, name, &region);
  case image_format::png: ACTORCH_FAIL(op, ": ", name, ": is a PNG image, not a JPEG");
  case image_format::unknown: break;
  }
  fail_unknown(op, name, data, size);
}

std::vector<uint8_t> read_file(const std::string& path) {
  return serialize::read_whole_file(path, "read_file");
}

} // namespace actorch::data::vision
