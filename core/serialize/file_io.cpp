// The shared file machinery of core/serialize/ (see file_io.hpp): reading memory and regular
// files at offsets, and atomic saves through a temporary file renamed over the target.
#include "core/serialize/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace actorch::serialize {

std::string errno_str(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Reading. -----------------------------------------------------------------------------------

void memory_source::read_at(uint64_t offset, void* dst, size_t n) {
  ACTORCH_INTERNAL_ASSERT(offset <= bytes_.size() && n <= bytes_.size() - offset);
  if (n > 0)
    std::memcpy(dst, bytes_.data() + offset, n);
}

file_source::file_source(const where& w, read_position wording) : w_(w), wording_(wording) {
  fd_ = ::open(w.name.c_str(), O_RDONLY | O_CLOEXEC);
  ACTORCH_IO_CHECK(fd_ >= 0, w, "cannot open the file: ", errno_str(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    ACTORCH_IO_FAIL(w, "cannot stat the file: ", errno_str(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    ACTORCH_IO_FAIL(w, "not a regular file (a directory, pipe or device cannot be loaded)");
  }
  size_ = uint64_t(st.st_size);
}

file_source::~file_source() {
  ::close(fd_);
}

void file_source::read_at(uint64_t offset, void* dst, size_t n) {
  // "at byte 40" or "after 40 bytes". See read_position.
  const bool at = wording_ == read_position::at_byte;
  const char* before = at ? "at byte " : "after ";
  const char* after = at ? "" : " bytes";
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR)
      continue;
    ACTORCH_IO_CHECK(r >= 0, w_, "read failed ", before, offset + done, after, ": ",
                     errno_str(errno));
    ACTORCH_IO_CHECK(r > 0, w_, "the file ended ", before, offset + done, after, ", but it had ",
                     size_, " when opened (was it truncated while being read?)");
    done += size_t(r);
  }
}

// Writing. -----------------------------------------------------------------------------------

atomic_file::atomic_file(const where& w, const fail_after_hook* hook) : w_(w), hook_(hook) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    path_ = w.name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0)
      return;
    ACTORCH_IO_CHECK(errno == EEXIST && attempt < 100, w, "cannot create the temporary file ",
                     path_, ": ", errno_str(errno));
  }
}

atomic_file::~atomic_file() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!renamed_)
    ::unlink(path_.c_str());
}

void atomic_file::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  const int64_t fail_after = hook_ ? hook_->bytes() : -1;
  if (fail_after >= 0 && written_ + n > uint64_t(fail_after)) {
    write_raw(p, size_t(uint64_t(fail_after) - written_));
    injected_failure();
  }
  write_raw(p, n);
}

void atomic_file::commit() {
  const int64_t fail_after = hook_ ? hook_->bytes() : -1;
  if (fail_after >= 0 && written_ >= uint64_t(fail_after))
    injected_failure();
  ACTORCH_IO_CHECK(::fsync(fd_) == 0, w_, "fsync of the temporary file ", path_,
                   " failed: ", errno_str(errno));
  const int fd = std::exchange(fd_, -1);
  ACTORCH_IO_CHECK(::close(fd) == 0, w_, "closing the temporary file ", path_,
                   " failed: ", errno_str(errno));
  ACTORCH_IO_CHECK(::rename(path_.c_str(), w_.name.c_str()) == 0, w_, "renaming ", path_,
                   " over the target failed: ", errno_str(errno));
  renamed_ = true;
  // Best effort: the file is complete and in place; a failure here (some file systems
  // refuse fsync on directories) only means the rename might not survive a power cut.
  const std::string dir = std::filesystem::path(w_.name).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void atomic_file::injected_failure() const {
  ACTORCH_IO_FAIL(w_, "injected failure after writing ", written_, " bytes of ", path_, " (",
                  hook_->setter_name(), ")");
}

void atomic_file::write_raw(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::write(fd_, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    ACTORCH_IO_CHECK(r > 0, w_, "writing the temporary file ", path_,
                     " failed: ", r < 0 ? errno_str(errno) : std::string("no progress"));
    p += r;
    n -= size_t(r);
    written_ += uint64_t(r);
  }
}

} // namespace actorch::serialize
