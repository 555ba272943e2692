// file_store: see the header. Record format, little-endian as the host writes it:
//   op (1 byte: 's' set, 'd' delete), key length (u32), key, value length (u32), value.
#include "comm/store/file_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/error.hpp"
#include "comm/host_identity.hpp"
#include "comm/store/hash_store.hpp"

namespace actorch::dist {

// Note [Stale store files]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The last user removes the file, but a job that crashed leaves it behind, with the Gloo
// addresses of processes that are gone: the next job on that path would read them and fail
// with "Connection refused". So each user also records who it is (host, boot id, pid and the
// pid's start time) and deletes the record when it closes. A job's store (world_size given)
// that finds a file whose every recorded user is a process of this host that no longer runs,
// or a file with no user left at all, starts it afresh and says so on stderr. Users on other
// hosts (a shared file system) cannot be checked: their records keep the file as it is.

namespace {
constexpr const char* kRefKey = "__file_store_users__";
constexpr const char* kUserPrefix = "__file_store_user__ ";

std::string user_record() {
  return kUserPrefix + host_id() + " " + std::to_string(::getpid()) + " " +
         process_start_time(::getpid());
}

/// Whether the user a record names may still run (`here`: host_id()); on another machine, we
/// cannot tell.
bool may_be_alive(const std::string& record, const std::string& here) {
  std::istringstream in(record.substr(std::strlen(kUserPrefix)));
  std::string host, start;
  pid_t pid = 0;
  in >> host >> pid >> start;
  return host != here || process_start_time(pid) == start;
}
} // namespace

class file_store::locked_file {
public:
  locked_file(const std::string& path, bool exclusive) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ACTORCH_CHECK(fd_ >= 0, "file_store: cannot open '", path, "': ", std::strerror(errno));
    int rc = 0;
    do {
      rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      ::close(fd_);
      ACTORCH_FAIL("file_store: cannot lock '", path, "': ", std::strerror(err));
    }
  }
  ~locked_file() { ::close(fd_); } // closing drops the lock
  locked_file(const locked_file&) = delete;
  locked_file& operator=(const locked_file&) = delete;
  int fd() const { return fd_; }

private:
  int fd_ = -1;
};

file_store::file_store(std::string path, int world_size, milliseconds timeout)
    : store(timeout), path_(std::move(path)), world_size_(world_size) {
  ACTORCH_CHECK(!path_.empty(), "file_store: the path is empty");
  ACTORCH_CHECK(world_size_ >= 1 || world_size_ == -1, "file_store: world_size must be >= 1 or -1",
                " but got ", world_size_);
  std::lock_guard lock(mu_);
  locked_file f(path_, true);
  replay(f);
  if (world_size_ != -1 && pos_ > 0) { // See Note [Stale store files].
    std::vector<std::string> users;
    for (const auto& [k, v] : data_)
      if (k.rfind(kUserPrefix, 0) == 0)
        users.push_back(k);
    const std::string here = host_id();
    if (std::none_of(users.begin(), users.end(),
                     [&](const std::string& u) { return may_be_alive(u, here); })) {
      std::fprintf(stderr,
                   "file_store: '%s' was left by a job whose processes are gone (%zu recorded, "
                   "none running): starting it afresh\n",
                   path_.c_str(), users.size());
      ACTORCH_CHECK(::ftruncate(f.fd(), 0) == 0, "file_store: cannot truncate '", path_,
                    "': ", std::strerror(errno));
      pos_ = 0;
      data_.clear();
    }
  }
  add_locked(f, kRefKey, 1);
  record_ = user_record();
  append(f, 's', record_, {});
}

file_store::~file_store() {
  try {
    std::lock_guard lock(mu_);
    locked_file f(path_, true);
    const int64_t users = add_locked(f, kRefKey, -1);
    append(f, 'd', record_, {});
    // The last user removes the file while still holding the lock, so nobody reads a half log.
    if (world_size_ != -1 && users == 0)
      ::unlink(path_.c_str());
  } catch (...) {
    // A destructor must not throw; the file stays behind, which costs only disk space.
  }
}

void file_store::replay(locked_file& f) {
  std::string bytes; // what other handles appended since our last look
  const off_t end = ::lseek(f.fd(), 0, SEEK_END);
  ACTORCH_CHECK(end >= 0, "file_store: cannot seek '", path_, "': ", std::strerror(errno));
  if (end < pos_) { // the file was removed and recreated by a new run: start over
    pos_ = 0;
    data_.clear();
  }
  bytes.resize(size_t(end - pos_));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n =
        ::pread(f.fd(), bytes.data() + got, bytes.size() - got, off_t(pos_ + int64_t(got)));
    if (n < 0 && errno == EINTR)
      continue;
    ACTORCH_CHECK(n > 0, "file_store: cannot read '", path_, "': ", std::strerror(errno));
    got += size_t(n);
  }
  size_t i = 0;
  auto take_u32 = [&](uint32_t& v) {
    ACTORCH_CHECK(i + 4 <= bytes.size(), "file_store: '", path_, "' is truncated");
    std::memcpy(&v, bytes.data() + i, 4);
    i += 4;
  };
  while (i < bytes.size()) {
    const char op = bytes[i++];
    uint32_t klen = 0, vlen = 0;
    take_u32(klen);
    ACTORCH_CHECK(i + klen <= bytes.size(), "file_store: '", path_, "' is truncated");
    std::string key = bytes.substr(i, klen);
    i += klen;
    take_u32(vlen);
    ACTORCH_CHECK(i + vlen <= bytes.size(), "file_store: '", path_, "' is truncated");
    if (op == 's')
      data_[key] = bytes.substr(i, vlen);
    else if (op == 'd')
      data_.erase(key);
    else
      ACTORCH_FAIL("file_store: '", path_, "' is not a store file (record type ", int(op), ")");
    i += vlen;
  }
  pos_ = end;
}

void file_store::append(locked_file& f, char op, const std::string& key, const std::string& value) {
  std::string rec(1, op);
  const auto klen = uint32_t(key.size()), vlen = uint32_t(value.size());
  rec.append(reinterpret_cast<const char*>(&klen), 4).append(key);
  rec.append(reinterpret_cast<const char*>(&vlen), 4).append(value);
  size_t put = 0;
  while (put < rec.size()) {
    const ssize_t n =
        ::pwrite(f.fd(), rec.data() + put, rec.size() - put, off_t(pos_ + int64_t(put)));
    if (n < 0 && errno == EINTR)
      continue;
    ACTORCH_CHECK(n > 0, "file_store: cannot write '", path_, "': ", std::strerror(errno));
    put += size_t(n);
  }
  pos_ += int64_t(rec.size());
  if (op == 's')
    data_[key] = value;
  else
    data_.erase(key);
}

int64_t file_store::add_locked(locked_file& f, const std::string& key, int64_t delta) {
  replay(f);
  auto it = data_.find(key);
  const int64_t v = (it == data_.end() ? 0 : parse_counter(key, it->second)) + delta;
  append(f, 's', key, std::to_string(v));
  return v;
}

void file_store::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  locked_file f(path_, true);
  replay(f);
  append(f, 's', key, value);
}

int64_t file_store::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mu_);
  locked_file f(path_, true);
  return add_locked(f, key, delta);
}

std::string file_store::compare_set(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  std::lock_guard lock(mu_);
  locked_file f(path_, true);
  replay(f);
  auto it = data_.find(key);
  if (it == data_.end() ? expected.empty() : it->second == expected) {
    append(f, 's', key, desired);
    return desired;
  }
  return it == data_.end() ? expected : it->second;
}

bool file_store::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  locked_file f(path_, false);
  replay(f);
  for (const auto& k : keys)
    if (!data_.contains(k))
      return false;
  return true;
}

void file_store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  // Processes share no condition variable: poll, backing off to 10 ms.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw_timeout("file_store", keys, timeout);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

bool file_store::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  locked_file f(path_, true);
  replay(f);
  if (!data_.contains(key))
    return false;
  append(f, 'd', key, {});
  return true;
}

int64_t file_store::num_keys() {
  std::lock_guard lock(mu_);
  locked_file f(path_, false);
  replay(f);
  int64_t own = data_.contains(kRefKey) ? 1 : 0; // the store's bookkeeping is not a key
  for (const auto& [k, v] : data_)
    own += k.rfind(kUserPrefix, 0) == 0 ? 1 : 0;
  return int64_t(data_.size()) - own;
}

std::string file_store::get_now(const std::string& key) {
  std::lock_guard lock(mu_);
  locked_file f(path_, false);
  replay(f);
  auto it = data_.find(key);
  ACTORCH_CHECK(it != data_.end(), "file_store: key '", key, "' was deleted while being read");
  return it->second;
}

} // namespace actorch::dist
