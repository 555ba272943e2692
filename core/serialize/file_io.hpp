// The file machinery the serialization formats share (npy.cpp, safetensors.cpp): messages that
// name the operation and the file, byte sources read at offsets (memory or a regular file), and
// atomic_file, which writes a temporary file next to the target and renames it over the target
// only once it is complete and fsync'ed. Everything here is internal to core/serialize/: the
// namespace actorch::serialize is not public API.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace actorch::serialize {

/// Whose error it is: the operation and the file (or name) it was reading or writing. Every
/// message of the readers and writers starts with "op: name: ".
struct where {
  const char* op;
  const std::string& name;
};

/// ACTORCH_CHECK / ACTORCH_FAIL with the message prefixed by "op: name: " of `w`.
#define ACTORCH_IO_CHECK(cond, w, ...)                                                             \
  ACTORCH_CHECK(cond, (w).op, ": ", (w).name, ": ", __VA_ARGS__)
#define ACTORCH_IO_FAIL(w, ...) ACTORCH_FAIL((w).op, ": ", (w).name, ": ", __VA_ARGS__)

/// Opens `path` for reading; it must be a regular file, and anything else is refused without
/// waiting (a FIFO with no writer included). Returns its descriptor (and its size in
/// *size when given), or -1 with *why the system's reason: "No such file or directory", "Is a
/// directory", "not a regular file (a pipe or device cannot be loaded)".
int open_regular_file(const std::string& path, uint64_t* size, std::string* why);

/// The whole of the regular file at `path` (read until its end: the size is only a hint).
/// @throws actorch::error "op: path: why" when it cannot be opened (open_regular_file's
/// reasons) or read.
std::vector<uint8_t> read_whole_file(const std::string& path, const char* op);

// Reading. -----------------------------------------------------------------------------------

/// Where the bytes of a file come from: a file or memory, whose size is known up front.
class byte_source {
public:
  virtual ~byte_source() = default;
  virtual uint64_t size() const = 0;
  /// Copies the n bytes at `offset` to dst. @pre they lie within size().
  virtual void read_at(uint64_t offset, void* dst, size_t n) = 0;
};

/// Reads a byte_source from its start on, for formats read front to back (npy).
class byte_cursor {
public:
  explicit byte_cursor(byte_source& src) : src_(src) {}
  uint64_t size() const { return src_.size(); }
  /// Copies the next n bytes to dst. @pre they lie within size().
  void read(void* dst, size_t n) {
    src_.read_at(pos_, dst, n);
    pos_ += n;
  }

private:
  byte_source& src_;
  uint64_t pos_ = 0;
};

class memory_source final : public byte_source {
public:
  explicit memory_source(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, void* dst, size_t n) override;

private:
  std::string_view bytes_;
};

/// How file_source's read errors name the position where they happened. Each format keeps its
/// own wording: safetensors reads at offsets ("read failed at byte 40"); npy reads front to
/// back and counts what it has read ("read failed after 40 bytes"). The number is the same.
enum class read_position { at_byte, after_bytes };

/// A regular file, opened (and its size taken) on construction, read with pread.
/// Throws actorch::error naming `w` when the file cannot be opened or is not a regular file,
/// and when a read fails or finds the file shorter than it was when opened.
class file_source final : public byte_source {
public:
  /// @pre `w` outlives the file_source.
  explicit file_source(const where& w, read_position wording = read_position::at_byte);
  ~file_source() override;
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;

  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* dst, size_t n) override;

private:
  const where& w_;
  read_position wording_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writing. -----------------------------------------------------------------------------------

/// Where the bytes of a save go.
class byte_sink {
public:
  virtual ~byte_sink() = default;
  virtual void write(const void* data, size_t n) = 0;
};

/// Appends to a string (the *_to_bytes functions).
class string_sink final : public byte_sink {
public:
  explicit string_sink(std::string& out) : out_(out) {}
  void write(const void* data, size_t n) override {
    out_.append(static_cast<const char*>(data), n);
  }

private:
  std::string& out_;
};

/// A process-wide test hook that makes the atomic_files given it fail part way. While armed with
/// n >= 0, such a file throws once it has written n bytes, before writing more or renaming (n =
/// the file's size fails just before the rename); n < 0 disarms it. The message names
/// `setter_name`, the public function that arms the hook. Each format owns its hook: only
/// safetensors has one (detail::set_safetensors_fail_after_bytes), so npy saves never fail
/// through it.
class fail_after_hook {
public:
  constexpr explicit fail_after_hook(const char* setter_name) : setter_name_(setter_name) {}
  void set(int64_t n) { bytes_.store(n < 0 ? -1 : n); }
  int64_t bytes() const { return bytes_.load(); }
  const char* setter_name() const { return setter_name_; }

private:
  std::atomic<int64_t> bytes_{-1};
  const char* setter_name_;
};

/// The temporary file of one save to w.name: created next to the target with O_EXCL as
/// <target>.tmp.<host>.<pid>.<n>, renamed over the target by commit(), and removed by the
/// destructor unless that rename happened. Creating it first removes the temporaries of the same
/// target that dead processes of this host left (Note [Temporary files of dead processes]).
/// Throws actorch::error naming `w` and the temporary file for every failure.
/// @post if commit() did not return, w.name is untouched and no temporary file is left behind.
class atomic_file final : public byte_sink {
public:
  /// @pre `w` (and `hook`, when given) outlive the atomic_file.
  explicit atomic_file(const where& w, const fail_after_hook* hook = nullptr);
  ~atomic_file() override;
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;

  void write(const void* data, size_t n) override;

  /// fsync, close, rename over the target, then fsync the directory so the rename persists.
  void commit();

private:
  [[noreturn]] void injected_failure() const;
  void write_raw(const char* p, size_t n);

  const where& w_;
  const fail_after_hook* hook_;
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool renamed_ = false;
};

} // namespace actorch::serialize
