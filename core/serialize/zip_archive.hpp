// Zip archives as PyTorch's checkpoints use them (its PyTorchStreamWriter/Reader): reading the
// entries of an archive in a file or in memory (stored or deflated), and writing stored entries
// with each record's data aligned to 64 bytes, as torch writes them. Zip64 both ways
// (APPNOTE 4.5.3, 4.3.14-15): what an entry, an offset or a count past the 32- or 16-bit fields
// needs, as a checkpoint over 4 GiB does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/serialize/file_io.hpp"

namespace actorch::serialize {

/// The entries of a zip archive, in the order of its central directory. Opening reads only the
/// end records and the central directory; each entry is read when asked for.
class zip_reader {
public:
  /// @throws actorch::error naming `name` for bytes that are not a zip archive this reader can
  /// read (encryption and methods other than stored and deflated are refused by name), or a
  /// corrupt one. @pre `src` outlives the reader.
  zip_reader(byte_source& src, std::string name);
  /// An archive in memory. @pre `bytes` outlive the reader.
  zip_reader(std::string_view bytes, std::string name);
  ~zip_reader();
  zip_reader(const zip_reader&) = delete;
  zip_reader& operator=(const zip_reader&) = delete;

  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& wanted) const;
  /// The entry's size once inflated.
  uint64_t size_of(const std::string& wanted) const;
  /// The entry's bytes (inflated if need be; checked against its CRC-32).
  std::string read(const std::string& wanted) const;
  /// The entry's bytes into `dst`, which holds size_of(wanted) of them: a stored entry is read
  /// straight there, a deflated one inflated there from slices of the source.
  void read_into(const std::string& wanted, char* dst) const;

private:
  struct entry {
    uint16_t method;
    uint32_t crc;
    uint64_t compressed, size, local_offset;
  };
  void open(byte_source& src, std::string name);
  size_t index_of(const std::string& wanted) const;

  std::unique_ptr<memory_source> own_; // the in-memory archive's source
  byte_source* src_ = nullptr;
  std::string name_;
  std::vector<std::string> names_;
  std::vector<entry> entries_;
};

/// An archive built in memory: stored entries, data 64-byte aligned. Zip64 records where the
/// sizes, offsets or count need them; `always_zip64` writes them for every entry and the end
/// (for tests: readers meet them without a 4 GiB file).
class zip_writer {
public:
  explicit zip_writer(bool always_zip64 = false) : always_zip64_(always_zip64) {}
  void add(const std::string& name, std::string_view data);
  /// The archive's bytes (the central directory appended).
  std::string finish();

private:
  struct entry {
    std::string name;
    uint32_t crc;
    uint64_t size, local_offset;
  };
  bool always_zip64_;
  std::string out_;
  std::vector<entry> entries_;
};

} // namespace actorch::serialize
