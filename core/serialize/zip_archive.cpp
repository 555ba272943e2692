// zip_reader and zip_writer: the parts of the zip format (PKWARE's APPNOTE) PyTorch's
// checkpoints use: local headers, the central directory and its end record; stored (0) and
// deflated (8) entries; CRC-32 through zlib.
#include "core/serialize/zip_archive.hpp"

#include <cstring>

#include <zlib.h>

#include "base/error.hpp"

namespace actorch::serialize {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndRecord = 0x06054b50;

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
    : bytes_(bytes), name_(std::move(name)) {
  const size_t n = bytes.size();
  ACTORCH_CHECK(n >= 22, "zip: ", name_, ": too short for a zip archive (", n, " bytes)");
  // The end record is the last 22 bytes plus a comment of at most 64 KiB.
  size_t end = std::string_view::npos;
  for (size_t at = n - 22 + 1; at-- > 0 && n - at <= 22 + 65535;)
    if (get<uint32_t>(bytes, at) == kEndRecord) {
      end = at;
      break;
    }
  ACTORCH_CHECK(end != std::string_view::npos, "zip: ", name_,
                ": no end of central directory record (not a zip archive, or a truncated one)");
  const uint16_t count = get<uint16_t>(bytes, end + 10);
  const uint32_t dir_size = get<uint32_t>(bytes, end + 12), dir_at = get<uint32_t>(bytes, end + 16);
  ACTORCH_CHECK(count != 0xffff && dir_at != 0xffffffff, "zip: ", name_,
                ": a zip64 archive (a checkpoint over 4 GiB), which is not supported yet");
  ACTORCH_CHECK(uint64_t(dir_at) + dir_size <= end, "zip: ", name_,
                ": the central directory lies outside the file (truncated or corrupt)");
  size_t at = dir_at;
  for (uint16_t i = 0; i < count; ++i) {
    ACTORCH_CHECK(at + 46 <= end && get<uint32_t>(bytes, at) == kCentralHeader, "zip: ", name_,
                  ": central directory entry ", i, " is corrupt");
    const uint16_t flags = get<uint16_t>(bytes, at + 8);
    entry e{get<uint16_t>(bytes, at + 10), get<uint32_t>(bytes, at + 16),
            get<uint32_t>(bytes, at + 20), get<uint32_t>(bytes, at + 24),
            get<uint32_t>(bytes, at + 42)};
    const uint16_t name_len = get<uint16_t>(bytes, at + 28),
                   extra_len = get<uint16_t>(bytes, at + 30),
                   comment_len = get<uint16_t>(bytes, at + 32);
    ACTORCH_CHECK(at + 46 + name_len <= end, "zip: ", name_, ": central directory entry ", i,
                  " is corrupt");
    std::string entry_name(bytes.substr(at + 46, name_len));
    ACTORCH_CHECK(!(flags & 1), "zip: ", name_, ": entry ", entry_name, " is encrypted");
    ACTORCH_CHECK(e.method == 0 || e.method == 8, "zip: ", name_, ": entry ", entry_name,
                  " uses compression method ", e.method, " (only stored and deflated are read)");
    ACTORCH_CHECK(e.size != 0xffffffff && e.compressed != 0xffffffff &&
                      e.local_offset != 0xffffffff,
                  "zip: ", name_, ": entry ", entry_name, " is a zip64 entry (not supported yet)");
    names_.push_back(std::move(entry_name));
    entries_.push_back(e);
    at += 46 + name_len + extra_len + comment_len;
  }
}

bool zip_reader::has(const std::string& wanted) const {
  for (const auto& n : names_)
    if (n == wanted)
      return true;
  return false;
}

std::string zip_reader::read(const std::string& name) const {
  size_t i = 0;
  while (i < names_.size() && names_[i] != name)
    ++i;
  ACTORCH_CHECK(i < names_.size(), "zip: ", name_, ": no entry ", name);
  const entry& e = entries_[i];
  const size_t at = e.local_offset;
  ACTORCH_CHECK(at + 30 <= bytes_.size() && get<uint32_t>(bytes_, at) == kLocalHeader,
                "zip: ", name_, ": the local header of ", name, " is corrupt");
  const size_t data_at =
      at + 30 + get<uint16_t>(bytes_, at + 26) + size_t(get<uint16_t>(bytes_, at + 28));
  ACTORCH_CHECK(data_at + e.compressed <= bytes_.size(), "zip: ", name_, ": entry ", name,
                " runs past the end of the file (truncated)");
  const std::string_view packed = bytes_.substr(data_at, e.compressed);
  std::string out;
  if (e.method == 0) {
    ACTORCH_CHECK(e.compressed == e.size, "zip: ", name_, ": stored entry ", name,
                  " has two sizes");
    out.assign(packed);
  } else {
    out.resize(e.size);
    z_stream z{};
    ACTORCH_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "zip: inflateInit2 failed");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
    z.avail_in = uInt(packed.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const uLong produced = z.total_out;
    inflateEnd(&z);
    ACTORCH_CHECK(rc == Z_STREAM_END && produced == e.size, "zip: ", name_, ": entry ", name,
                  " does not inflate to its ", e.size, " bytes (corrupt)");
  }
  ACTORCH_CHECK(crc_of(out) == e.crc, "zip: ", name_, ": entry ", name,
                " fails its CRC-32 check (corrupt)");
  return out;
}

void zip_writer::add(const std::string& name, std::string_view data) {
  ACTORCH_CHECK(data.size() < 0xffffffffu && out_.size() < 0xffffffffu, "zip: entry ", name,
                " would need zip64 (over 4 GiB), which is not supported yet");
  const uint32_t offset = uint32_t(out_.size());
  // Pad with an extra field so that the data starts on a 64-byte boundary, as torch does.
  const size_t header = 30 + name.size() + 4;
  const size_t pad = (64 - (out_.size() + header) % 64) % 64;
  const uint32_t crc = crc_of(data);
  put(out_, kLocalHeader);
  put(out_, uint16_t(20));   // version needed
  put(out_, uint16_t(0));    // flags
  put(out_, uint16_t(0));    // stored
  put(out_, uint16_t(0));    // time
  put(out_, uint16_t(0x21)); // date: 1980-01-01
  put(out_, crc);
  put(out_, uint32_t(data.size()));
  put(out_, uint32_t(data.size()));
  put(out_, uint16_t(name.size()));
  put(out_, uint16_t(4 + pad));
  out_ += name;
  put(out_, uint16_t(0x4246)); // "FB": torch's padding field
  put(out_, uint16_t(pad));
  out_.append(pad, 'Z');
  out_.append(data);
  entries_.push_back({name, crc, uint32_t(data.size()), offset});
}

std::string zip_writer::finish() {
  const uint32_t dir_at = uint32_t(out_.size());
  for (const entry& e : entries_) {
    put(out_, kCentralHeader);
    put(out_, uint16_t(20)); // made by
    put(out_, uint16_t(20)); // needed
    put(out_, uint16_t(0));
    put(out_, uint16_t(0));
    put(out_, uint16_t(0));
    put(out_, uint16_t(0x21));
    put(out_, e.crc);
    put(out_, e.size);
    put(out_, e.size);
    put(out_, uint16_t(e.name.size()));
    put(out_, uint16_t(0)); // extra
    put(out_, uint16_t(0)); // comment
    put(out_, uint16_t(0)); // disk
    put(out_, uint16_t(0)); // internal attributes
    put(out_, uint32_t(0)); // external attributes
    put(out_, e.local_offset);
    out_ += e.name;
  }
  ACTORCH_CHECK(entries_.size() < 0xffff && out_.size() < 0xffffffffu,
                "zip: an archive that needs zip64, which is not supported yet");
  const uint32_t dir_size = uint32_t(out_.size()) - dir_at;
  put(out_, kEndRecord);
  put(out_, uint16_t(0));
  put(out_, uint16_t(0));
  put(out_, uint16_t(entries_.size()));
  put(out_, uint16_t(entries_.size()));
  put(out_, dir_size);
  put(out_, dir_at);
  put(out_, uint16_t(0));
  return std::move(out_);
}

} // namespace actorch::serialize
