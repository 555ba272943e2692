// The argument and environment arrays exec takes, made before a fork: a child of a process with
// threads must not allocate between fork and exec (a lock another thread held at the fork stays
// held in the child).
#pragma once

#include <string>
#include <vector>

namespace actorch {

/// The null-terminated array of C strings that execv and execve take (argv, envp), over
/// `strings`, which must outlive it unchanged.
inline std::vector<char*> exec_args(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str())); // exec's signature only: nothing writes them
  out.push_back(nullptr);
  return out;
}

} // namespace actorch
