// The shared file machinery of core/serialize/ (see file_io.hpp): reading memory and regular
// files at offsets, and atomic saves through a temporary file renamed over the target.
#include "core/serialize/file_io.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

namespace actorch::serialize {

// Reading. -----------------------------------------------------------------------------------

void memory_source::read_at(uint64_t offset, void* dst, size_t n) {
  ACTORCH_INTERNAL_ASSERT(offset <= bytes_.size() && n <= bytes_.size() - offset);
  if (n > 0)
    std::memcpy(dst, bytes_.data() + offset, n);
}

int open_regular_file(const std::string& path, uint64_t* size, std::string* why) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer, for ever if none comes,
  // before fstat could refuse it. Cleared below once the file is known to be regular.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = errno_str(errno);
    return -1;
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0)
    problem = errno_str(errno);
  else if (S_ISDIR(st.st_mode))
    problem = "Is a directory"; // open() takes a directory: only its reads would fail
  else if (!S_ISREG(st.st_mode))
    problem = "not a regular file (a pipe or device cannot be loaded)";
  else if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    problem = errno_str(errno);
  if (!problem.empty()) {
    ::close(fd);
    *why = std::move(problem);
    return -1;
  }
  if (size)
    *size = uint64_t(st.st_size);
  return fd;
}

std::vector<uint8_t> read_whole_file(const std::string& path, const char* op) {
  uint64_t size = 0;
  std::string why;
  const int fd = open_regular_file(path, &size, &why);
  ACTORCH_CHECK(fd >= 0, op, ": ", path, ": ", why);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_it{fd};
  // The spare byte lets the read that finds the end happen without growing the buffer.
  std::vector<uint8_t> out(size_t(size) + 1);
  size_t filled = 0;
  for (;;) {
    if (filled == out.size())
      out.resize(out.size() * 2);
    const ssize_t n = ::read(fd, out.data() + filled, out.size() - filled);
    if (n == 0)
      break;
    if (n < 0 && errno == EINTR)
      continue;
    ACTORCH_CHECK(n > 0, op, ": ", path, ": ", errno_str(errno));
    filled += size_t(n);
  }
  out.resize(filled);
  return out;
}

file_source::file_source(const where& w, read_position wording) : w_(w), wording_(wording) {
  std::string why;
  fd_ = open_regular_file(w.name, &size_, &why);
  ACTORCH_IO_CHECK(fd_ >= 0, w, "cannot open the file: ", why);
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

// Note [Temporary files of dead processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A save writes <target>.tmp.<host>.<pid>.<n> and renames it over the target. A process killed
// between the two (SIGKILL, the OOM killer, a power cut) leaves its temporary file behind, as
// large as the checkpoint, and no destructor runs to remove it. So each save first removes the
// temporaries of the same target that this host's dead processes left: same host name, and no
// process with that pid (kill(pid, 0) fails with ESRCH). A live pid keeps its file, even if the
// pid was reused since (the file then stays until that process ends: a leak, never a loss). A
// temporary of another host (a shared file system) is never touched: its pid means nothing here.
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  std::string name = buf;
  for (char& c : name) // a file name's part: no '/', nothing a shell would trip on
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      c = '_';
  return name;
}

/// The pid in `suffix` ("<host>.<pid>.<n>") when its host is `host`, else -1.
pid_t pid_of_temporary(std::string_view suffix, std::string_view host) {
  const size_t last = suffix.rfind('.');
  if (last == std::string_view::npos || last == 0)
    return -1;
  const size_t mid = suffix.rfind('.', last - 1);
  if (mid == std::string_view::npos || suffix.substr(0, mid) != host)
    return -1;
  auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 9 && d.find_first_not_of("0123456789") == d.npos;
  };
  const std::string_view pid = suffix.substr(mid + 1, last - mid - 1);
  if (!digits(pid) || !digits(suffix.substr(last + 1)))
    return -1;
  return pid_t(std::stol(std::string(pid)));
}

void remove_dead_temporaries(const std::string& target, const std::string& host) {
  namespace fs = std::filesystem;
  const fs::path target_path(target);
  const fs::path dir = target_path.has_parent_path() ? target_path.parent_path() : fs::path(".");
  const std::string prefix = target_path.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix))
      continue;
    const pid_t pid = pid_of_temporary(std::string_view(name).substr(prefix.size()), host);
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
      (void)::unlink(it->path().c_str()); // best effort: another save may remove it first
  }
}

} // namespace

atomic_file::atomic_file(const where& w, const fail_after_hook* hook) : w_(w), hook_(hook) {
  static std::atomic<uint64_t> counter{0};
  static const std::string host = host_name();
  remove_dead_temporaries(w.name, host); // Note [Temporary files of dead processes]
  for (int attempt = 0;; ++attempt) {
    path_ = w.name + ".tmp." + host + "." + std::to_string(::getpid()) + "." +
            std::to_string(counter++);
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
