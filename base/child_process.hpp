// Child processes, for the launcher's ranks, the loader's worker processes and the tests: the
// arrays exec takes, dying with the parent, reaping, and a wait status in words.
//
// A child of a process with threads must not allocate between fork and exec (a lock another
// thread held at the fork stays held in the child): exec_args are made before the fork, and
// die_with_parent allocates nothing.
#pragma once

#include <sys/types.h>

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

/// In a child just forked by `parent`: the kernel sends it SIGKILL when the parent dies, so no
/// child outlives a parent killed with SIGKILL (holding its ports and memory, with parent pid
/// 1). A parent that died before the request took effect is caught by the check after it: the
/// child then exits at once with 128 + SIGKILL, the status the death signal would have given.
void die_with_parent(pid_t parent);

/// Blocks until `pid` has ended (retrying after signals); its wait status.
int reap(pid_t pid);

/// A wait status in words: "exited with status 3", "was killed by signal 9 (Killed)".
std::string describe_wait_status(int status);

} // namespace actorch
