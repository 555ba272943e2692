// Scratch files for tests: a folder of the test's own under the build's scratch directory
// (ACTORCH_TEST_TMP), and whole-file reads and writes.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

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

} // namespace actorch::test
