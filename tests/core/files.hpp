// Scratch files for tests: a folder of the test's own under the build's scratch directory
// (ACTORCH_TEST_TMP), and whole-file reads and writes.
#pragma once

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

} // namespace actorch::test
