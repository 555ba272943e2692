// This process's memory for tests of bounds: fields of /proc/self/status, and its peak resident
// memory reset, so that a test can check how far a call made it grow.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace actorch::test {

/// A field of /proc/self/status in bytes ("VmData", "VmRSS", "VmHWM"); 0 if absent.
inline uint64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":"))
      return std::stoull(line.substr(field.size() + 1)) * 1024; // "  1234 kB"
  return 0;
}

/// Resets the peak resident memory (VmHWM) to the present one; false where the kernel cannot.
inline bool reset_peak_memory() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

} // namespace actorch::test
