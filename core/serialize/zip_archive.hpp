// Zip archives as PyTorch's checkpoints use them (its PyTorchStreamWriter/Reader): reading the
// entries of an archive in memory (stored or deflated), and writing stored entries with each
// record's data aligned to 64 bytes, as torch writes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorch::serialize {

/// The entries of a zip archive, in the order of its central directory.
class zip_reader {
public:
  /// @throws actorch::error naming `name` for bytes that are not a zip archive this reader can
  /// read (zip64 and encryption are refused by name), or a corrupt one.
  zip_reader(std::string_view bytes, std::string name);
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& wanted) const;
  /// The entry's bytes (inflated if need be; checked against its CRC-32).
  std::string read(const std::string& wanted) const;

private:
  struct entry {
    uint16_t method;
    uint32_t crc, compressed, size, local_offset;
  };
  std::string_view bytes_;
  std::string name_;
  std::vector<std::string> names_;
  std::vector<entry> entries_;
};

/// An archive built in memory: stored entries, data 64-byte aligned.
class zip_writer {
public:
  void add(const std::string& name, std::string_view data);
  /// The archive's bytes (the central directory appended).
  std::string finish();

private:
  struct entry {
    std::string name;
    uint32_t crc, size, local_offset;
  };
  std::string out_;
  std::vector<entry> entries_;
};

} // namespace actorch::serialize
