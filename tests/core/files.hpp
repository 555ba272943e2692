// Scratch files for tests: a folder of the test's own under the build's scratch directory
// (ACTORCH_TEST_TMP), whole-file reads and writes, a FIFO nobody writes to, and environment
// variables and stderr redirected for a scope.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

namespace actorch::test {

/// ACTORCH_TEST_TMP/<name>, created on first use.
inline const std::filesystem::path& scratch_dir(const std::string& name) {
  static std::map<std::string, std::filesystem::path> dirs;
  auto it = dirs.find(name);
  if (it == dirs.end()) {
    std::filesystem::path p = std::filesystem::path(ACTORCH_TEST_TMP) / name;
    std::filesystem::create_directories(p);
    it = dirs.emplace(name, std::move(p)).first;
  }
  return it->second;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out);
}

/// A FIFO at `path` that nobody writes to, for readers that must refuse it at once. Should one
/// wait for a writer instead (in open or in a read), a writer comes after 5 seconds and leaves
/// at once, so that the test fails on the time or the message instead of hanging.
class unwritten_fifo {
public:
  explicit unwritten_fifo(std::string path) : path_(std::move(path)) {
    std::filesystem::remove(path_);
    REQUIRE(::mkfifo(path_.c_str(), 0600) == 0);
    watchdog_ = std::thread([this] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (std::chrono::steady_clock::now() < give_up)
          continue;
        // Succeeds only while a reader has it open (or waits in open): no wait here.
        const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
          waited_on_ = true;
          ::close(fd);
        }
      }
    });
  }
  ~unwritten_fifo() {
    done_ = true;
    watchdog_.join();
    std::filesystem::remove(path_);
  }
  unwritten_fifo(const unwritten_fifo&) = delete;
  unwritten_fifo& operator=(const unwritten_fifo&) = delete;
  const std::string& path() const { return path_; }
  /// Whether a reader had it open long enough for the writer to come.
  bool waited_on() const { return waited_on_; }

private:
  std::string path_;
  std::atomic<bool> done_{false}, waited_on_{false};
  std::thread watchdog_;
};

/// Runs `code` under Debian's python3 (ACTORCH_PYTHON, which has numpy) as a script in `dir`,
/// with `sys` imported and the folder's path in `d`; returns the exit status (a failed assert
/// in the script is a non-zero status).
inline int run_python(const std::filesystem::path& dir, const std::string& name,
                      const std::string& code) {
  const std::string script = (dir / (name + ".py")).string();
  write_file(script, "import sys\nd = r'" + dir.string() + "'\n" + code);
  const std::string cmd = std::string("'") + ACTORCH_PYTHON + "' '" + script + "'";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Sets an environment variable (std::nullopt: unsets it) for its lifetime, then restores what
/// was there (or nothing).
class env_var {
public:
  env_var(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr)
      old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~env_var() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;

private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Sends this process's stderr (fd 2, every thread's) to a file for its lifetime; text() reads
/// what was written so far.
class stderr_capture {
public:
  explicit stderr_capture(const std::string& path) : path_(path), saved_(::dup(2)) {
    std::fflush(stderr);
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_capture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  std::string text() const {
    std::fflush(stderr);
    return read_file(path_);
  }

private:
  std::string path_;
  int saved_;
};

} // namespace actorch::test
