// zip_reader and zip_writer: the parts of the zip format (PKWARE's APPNOTE) PyTorch's
// checkpoints use: local headers, the central directory and its end record, their zip64 forms
// (the end record's zip64 twin and locator, the zip64 extra field 0x0001); stored (0) and
// deflated (8) entries; CRC-32 through zlib.
#include "core/serialize/zip_archive.hpp"

#include <algorithm>
#include <cstring>

#include <zlib.h>

#include "base/error.hpp"
#include "core/serialize/file_io.hpp"

namespace actorch::serialize {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndRecord = 0x06054b50,
                   kZip64EndRecord = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64Extra = 0x0001;
constexpr uint32_t kNone32 = 0xffffffff; // "in the zip64 field"
constexpr uint16_t kNone16 = 0xffff;

template <class T> T get(std::string_view b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T> void put(std::string& out, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

uint32_t crc_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < data.size()) { // zlib takes 32-bit lengths
    const uInt n = uInt(std::min<size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), n);
    done += n;
  }
  return uint32_t(crc);
}

} // namespace

zip_reader::zip_reader(std::string_view bytes, std::string name)
    : own_(std::make_unique<memory_source>(bytes)) {
  open(*own_, std::move(name));
}

zip_reader::zip_reader(byte_source& src, std::string name) {
  open(src, std::move(name));
}

zip_reader::~zip_reader() = default;

void zip_reader::open(byte_source& src, std::string name) {
  src_ = &src;
  name_ = std::move(name);
  const uint64_t n = src.size();
  ACTORCH_CHECK(n >= 22, "zip: ", name_, ": too short for a zip archive (", n, " bytes)");
  // The end record is the last 22 bytes plus a comment of at most 64 KiB; the zip64 locator,
  // when there is one, lies just before it. Only that tail and the central directory are read.
  const uint64_t tail_at = n - std::min<uint64_t>(n, 20 + 22 + 65535);
  std::string tail(size_t(n - tail_at), '\0');
  src.read_at(tail_at, tail.data(), tail.size());
  size_t end = std::string_view::npos;
  for (size_t at = tail.size() - 22 + 1; at-- > 0 && tail.size() - at <= 22 + 65535;)
    if (get<uint32_t>(tail, at) == kEndRecord) {
      end = at;
      break;
    }
  ACTORCH_CHECK(end != std::string_view::npos, "zip: ", name_,
                ": no end of central directory record (not a zip archive, or a truncated one)");
  const uint64_t end_at = tail_at + end; // in the file
  uint64_t count = get<uint16_t>(tail, end + 10), dir_size = get<uint32_t>(tail, end + 12),
           dir_at = get<uint32_t>(tail, end + 16);
  // A zip64 end record, found through the locator just before the end record, holds the
  // 64-bit count, size and offset (torch writes one always).
  if (end >= 20 && get<uint32_t>(tail, end - 20) == kZip64Locator) {
    const uint64_t at64 = get<uint64_t>(tail, end - 20 + 8);
    std::string record(56, '\0');
    ACTORCH_CHECK(end_at >= 20 + 56 && at64 <= end_at - 20 - 56, "zip: ", name_,
                  ": the zip64 end of central directory record is corrupt");
    src.read_at(at64, record.data(), record.size());
    ACTORCH_CHECK(get<uint32_t>(record, 0) == kZip64EndRecord, "zip: ", name_,
                  ": the zip64 end of central directory record is corrupt");
    count = get<uint64_t>(record, 32);
    dir_size = get<uint64_t>(record, 40);
    dir_at = get<uint64_t>(record, 48);
  } else {
    ACTORCH_CHECK(count != kNone16 && dir_at != kNone32 && dir_size != kNone32, "zip: ", name_,
                  ": the end record points to a zip64 record that is missing (corrupt)");
  }
  ACTORCH_CHECK(dir_at <= end_at && dir_size <= end_at - dir_at, "zip: ", name_,
                ": the central directory lies outside the file (truncated or corrupt)");
  ACTORCH_CHECK(count <= dir_size / 46, "zip: ", name_, ": the end record counts ", count,
                " entries, more than its central directory of ", dir_size,
                " bytes holds (corrupt)");
  std::string dir(size_t(dir_size), '\0');
  src.read_at(dir_at, dir.data(), dir.size());
  const std::string_view bytes = dir;
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    ACTORCH_CHECK(at + 46 <= bytes.size() && get<uint32_t>(bytes, at) == kCentralHeader,
                  "zip: ", name_, ": central directory entry ", i, " is corrupt");
    const uint16_t flags = get<uint16_t>(bytes, at + 8);
    entry e{get<uint16_t>(bytes, at + 10), get<uint32_t>(bytes, at + 16),
            get<uint32_t>(bytes, at + 20), get<uint32_t>(bytes, at + 24),
            get<uint32_t>(bytes, at + 42)};
    const uint16_t name_len = get<uint16_t>(bytes, at + 28),
                   extra_len = get<uint16_t>(bytes, at + 30),
                   comment_len = get<uint16_t>(bytes, at + 32);
    ACTORCH_CHECK(at + 46 + name_len + extra_len <= bytes.size(), "zip: ", name_,
                  ": central directory entry ", i, " is corrupt");
    std::string entry_name(bytes.substr(at + 46, name_len));
    ACTORCH_CHECK(!(flags & 1), "zip: ", name_, ": entry ", entry_name, " is encrypted");
    ACTORCH_CHECK(e.method == 0 || e.method == 8, "zip: ", name_, ": entry ", entry_name,
                  " uses compression method ", e.method, " (only stored and deflated are read)");
    // The zip64 extra field holds, in this order, each of the sizes and the offset whose
    // 32-bit field says "in the zip64 field".
    const std::string_view extra = bytes.substr(at + 46 + name_len, extra_len);
    for (size_t x = 0; x + 4 <= extra.size();) {
      const uint16_t id = get<uint16_t>(extra, x), len = get<uint16_t>(extra, x + 2);
      ACTORCH_CHECK(x + 4 + len <= extra.size(), "zip: ", name_, ": entry ", entry_name,
                    " has a corrupt extra field");
      if (id == kZip64Extra) {
        size_t v = x + 4;
        for (uint64_t* field : {&e.size, &e.compressed, &e.local_offset}) {
          if (*field != kNone32)
            continue;
          ACTORCH_CHECK(v + 8 <= x + 4 + len, "zip: ", name_, ": entry ", entry_name,
                        "'s zip64 extra field is too short");
          *field = get<uint64_t>(extra, v);
          v += 8;
        }
      }
      x += 4 + size_t(len);
    }
    ACTORCH_CHECK(e.size != kNone32 && e.compressed != kNone32 && e.local_offset != kNone32,
                  "zip: ", name_, ": entry ", entry_name,
                  " has 32-bit fields pointing to a zip64 extra field that is missing (corrupt)");
    // Deflate expands at most 1032-fold: a larger declared size is a lie, not an allocation.
    ACTORCH_CHECK(e.method == 0 || e.size <= e.compressed * 1032 + 64, "zip: ", name_, ": entry ",
                  entry_name, " claims ", e.size, " bytes from ", e.compressed,
                  " deflated ones, more than deflate can give (corrupt)");
    ACTORCH_CHECK(e.method != 0 || e.compressed == e.size, "zip: ", name_, ": stored entry ",
                  entry_name, " has two sizes");
    names_.push_back(std::move(entry_name));
    entries_.push_back(e);
    at += 46 + name_len + extra_len + comment_len;
  }
}

size_t zip_reader::index_of(const std::string& wanted) const {
  size_t i = 0;
  while (i < names_.size() && names_[i] != wanted)
    ++i;
  ACTORCH_CHECK(i < names_.size(), "zip: ", name_, ": no entry ", wanted);
  return i;
}

bool zip_reader::has(const std::string& wanted) const {
  return std::find(names_.begin(), names_.end(), wanted) != names_.end();
}

uint64_t zip_reader::size_of(const std::string& wanted) const {
  return entries_[index_of(wanted)].size;
}

std::string zip_reader::read(const std::string& wanted) const {
  std::string out(size_t(size_of(wanted)), '\0');
  read_into(wanted, out.data());
  return out;
}

void zip_reader::read_into(const std::string& name, char* dst) const {
  const entry& e = entries_[index_of(name)];
  const uint64_t n = src_->size();
  ACTORCH_CHECK(n >= 30 && e.local_offset <= n - 30, "zip: ", name_, ": the local header of ", name,
                " is corrupt");
  std::string local(30, '\0');
  src_->read_at(e.local_offset, local.data(), local.size());
  ACTORCH_CHECK(get<uint32_t>(local, 0) == kLocalHeader, "zip: ", name_, ": the local header of ",
                name, " is corrupt");
  const uint64_t data_at =
      e.local_offset + 30 + get<uint16_t>(local, 26) + uint64_t(get<uint16_t>(local, 28));
  ACTORCH_CHECK(data_at <= n && e.compressed <= n - data_at, "zip: ", name_, ": entry ", name,
                " runs past the end of the file (truncated)");
  if (e.method == 0) {
    if (e.size > 0)
      src_->read_at(data_at, dst, size_t(e.size));
  } else {
    // The deflated bytes come from the source a slice at a time and inflate straight into dst;
    // zlib counts in 32 bits, so each call is also given at most 1 GiB of output.
    constexpr size_t kSlice = size_t(1) << 20;
    std::string in(size_t(std::min<uint64_t>(e.compressed, kSlice)), '\0');
    z_stream z{};
    ACTORCH_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "zip: inflateInit2 failed");
    uint64_t read = 0;
    size_t out_done = 0;
    int rc = Z_OK;
    while (rc == Z_OK) {
      if (z.avail_in == 0 && read < e.compressed) {
        const size_t k = size_t(std::min<uint64_t>(e.compressed - read, in.size()));
        src_->read_at(data_at + read, in.data(), k);
        read += k;
        z.next_in = reinterpret_cast<Bytef*>(in.data());
        z.avail_in = uInt(k);
      }
      z.next_out = reinterpret_cast<Bytef*>(dst + out_done);
      z.avail_out = uInt(std::min<uint64_t>(e.size - out_done, 1u << 30));
      const uInt in0 = z.avail_in, out0 = z.avail_out;
      rc = inflate(&z, Z_NO_FLUSH);
      out_done += out0 - z.avail_out;
      if (rc == Z_OK && in0 == z.avail_in && out0 == z.avail_out)
        break; // no progress: truncated input or a full output
    }
    inflateEnd(&z);
    ACTORCH_CHECK(rc == Z_STREAM_END && out_done == e.size, "zip: ", name_, ": entry ", name,
                  " does not inflate to its ", e.size, " bytes (corrupt)");
  }
  ACTORCH_CHECK(crc_of(std::string_view(dst, size_t(e.size))) == e.crc, "zip: ", name_, ": entry ",
                name, " fails its CRC-32 check (corrupt)");
}

void zip_writer::add(const std::string& name, std::string_view data) {
  ACTORCH_CHECK(name.size() < kNone16, "zip: entry name of ", name.size(), " bytes is too long");
  const uint64_t offset = out_.size();
  const bool zip64 = always_zip64_ || data.size() >= kNone32 || offset >= kNone32;
  // Pad with an extra field so that the data starts on a 64-byte boundary, as torch does.
  const size_t extra64 = zip64 ? 4 + 16 : 0;
  const size_t header = 30 + name.size() + extra64 + 4;
  const size_t pad = (64 - (out_.size() + header) % 64) % 64;
  const uint32_t crc = crc_of(data);
  put(out_, kLocalHeader);
  put(out_, uint16_t(zip64 ? 45 : 20)); // version needed
  put(out_, uint16_t(0));               // flags
  put(out_, uint16_t(0));               // stored
  put(out_, uint16_t(0));               // time
  put(out_, uint16_t(0x21));            // date: 1980-01-01
  put(out_, crc);
  put(out_, zip64 ? kNone32 : uint32_t(data.size()));
  put(out_, zip64 ? kNone32 : uint32_t(data.size()));
  put(out_, uint16_t(name.size()));
  put(out_, uint16_t(extra64 + 4 + pad));
  out_ += name;
  if (zip64) {
    put(out_, kZip64Extra);
    put(out_, uint16_t(16));
    put(out_, uint64_t(data.size())); // uncompressed
    put(out_, uint64_t(data.size())); // compressed
  }
  put(out_, uint16_t(0x4246)); // "FB": torch's padding field
  put(out_, uint16_t(pad));
  out_.append(pad, 'Z');
  out_.append(data);
  entries_.push_back({name, crc, data.size(), offset});
}

std::string zip_writer::finish() {
  const uint64_t dir_at = out_.size();
  for (const entry& e : entries_) {
    const bool zip64 = always_zip64_ || e.size >= kNone32 || e.local_offset >= kNone32;
    put(out_, kCentralHeader);
    put(out_, uint16_t(zip64 ? 45 : 20)); // made by
    put(out_, uint16_t(zip64 ? 45 : 20)); // needed
    put(out_, uint16_t(0));
    put(out_, uint16_t(0));
    put(out_, uint16_t(0));
    put(out_, uint16_t(0x21));
    put(out_, e.crc);
    put(out_, zip64 ? kNone32 : uint32_t(e.size));
    put(out_, zip64 ? kNone32 : uint32_t(e.size));
    put(out_, uint16_t(e.name.size()));
    put(out_, uint16_t(zip64 ? 4 + 24 : 0)); // extra
    put(out_, uint16_t(0));                  // comment
    put(out_, uint16_t(0));                  // disk
    put(out_, uint16_t(0));                  // internal attributes
    put(out_, uint32_t(0));                  // external attributes
    put(out_, zip64 ? kNone32 : uint32_t(e.local_offset));
    out_ += e.name;
    if (zip64) { // the three 32-bit fields above, in their order
      put(out_, kZip64Extra);
      put(out_, uint16_t(24));
      put(out_, e.size);
      put(out_, e.size);
      put(out_, e.local_offset);
    }
  }
  const uint64_t dir_size = out_.size() - dir_at, count = entries_.size();
  const bool zip64 = always_zip64_ || count >= kNone16 || dir_at >= kNone32 || dir_size >= kNone32;
  if (zip64) {
    const uint64_t record_at = out_.size();
    put(out_, kZip64EndRecord);
    put(out_, uint64_t(44)); // the record's size after this field
    put(out_, uint16_t(45)); // made by
    put(out_, uint16_t(45)); // needed
    put(out_, uint32_t(0));  // this disk
    put(out_, uint32_t(0));  // the directory's disk
    put(out_, count);        // entries on this disk
    put(out_, count);        // entries
    put(out_, dir_size);
    put(out_, dir_at);
    put(out_, kZip64Locator);
    put(out_, uint32_t(0)); // the zip64 record's disk
    put(out_, record_at);
    put(out_, uint32_t(1)); // disks
  }
  put(out_, kEndRecord);
  put(out_, uint16_t(0));
  put(out_, uint16_t(0));
  put(out_, zip64 ? kNone16 : uint16_t(count));
  put(out_, zip64 ? kNone16 : uint16_t(count));
  put(out_, zip64 ? kNone32 : uint32_t(dir_size));
  put(out_, zip64 ? kNone32 : uint32_t(dir_at));
  put(out_, uint16_t(0));
  return std::move(out_);
}

} // namespace actorch::serialize
