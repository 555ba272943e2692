// Runs a group of ranks as processes forked from the test, rendezvousing through a TCP store
// on 127.0.0.1 that rank 0 hosts: what needs ranks in separate address spaces (reading a peer's
// memory across processes, a rank's death). Like on_ranks (ranks.hpp), each rank returns what it
// saw and the test checks the results in the test process.
#pragma once

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "comm/launch/launcher.hpp"
#include "comm/store/tcp_store.hpp"
#include "tests/comm/ranks.hpp"

namespace actorch::test {

/// Writes n bytes to fd (short of a closed reader).
inline void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0)
      return;
    p += k;
    n -= size_t(k);
  }
}

/// Reads fd to its end.
inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, size_t(k));
  return out;
}

/// Runs fn(rank, group) in `world` forked processes; returns each rank's result, or throws
/// std::runtime_error naming the first rank that threw (with its message) or died. The test
/// process must have no other threads (a forked child of a threaded process may not start
/// threads under TSan).
template <class R>
std::vector<R> on_processes(int world, const std::function<R(int, dist::process_group_gloo&)>& fn,
                            dist::process_group_gloo::options opts = short_timeout()) {
  static_assert(std::is_trivially_copyable_v<R>, "results travel as bytes through a pipe");
  const uint16_t port = dist::free_port();
  int release[2]; // closed by the test once every other rank is reaped: rank 0's store may go
  if (::pipe(release) != 0)
    throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (int r = 0; r < world; ++r) {
    int out[2];
    if (::pipe(out) != 0)
      throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(out[0]);
      ::close(release[1]);
      char ok = 1;
      R result{};
      std::string message;
      {
        std::shared_ptr<dist::tcp_store> st; // outlives the group: rank 0's hosts the store
        try {
          st = std::make_shared<dist::tcp_store>("127.0.0.1", port, r == 0, opts.timeout);
          dist::process_group_gloo pg(std::make_shared<dist::prefix_store>("pg", st), r, world,
                                      opts);
          result = fn(r, pg);
        } catch (const std::exception& e) {
          ok = 0;
          message = e.what();
        }
        write_all(out[1], &ok, 1);
        write_all(out[1], &result, sizeof result);
        write_all(out[1], message.data(), message.size());
        ::close(out[1]);
        if (r == 0)
          read_all(release[0]); // until the test closes its end
      }
      ::_exit(0);
    }
    ::close(out[1]);
    pids.push_back(pid);
    outs.push_back(out[0]);
  }
  ::close(release[0]);
  std::vector<R> results(static_cast<size_t>(world));
  std::string failure;
  for (int r = world - 1; r >= 0; --r) { // rank 0, the store's host, last
    if (r == 0)
      ::close(release[1]);
    const std::string got = read_all(outs[size_t(r)]);
    ::close(outs[size_t(r)]);
    int status = 0;
    ::waitpid(pids[size_t(r)], &status, 0);
    if (got.size() < 1 + sizeof(R) || got[0] != 1 || !WIFEXITED(status)) {
      const std::string why =
          got.size() >= 1 + sizeof(R)
              ? got.substr(1 + sizeof(R))
              : "exited with status " + std::to_string(status) + " before its result";
      failure = "rank " + std::to_string(r) + ": " + why;
    } else {
      std::memcpy(&results[size_t(r)], got.data() + 1, sizeof(R));
    }
  }
  if (!failure.empty())
    throw std::runtime_error(failure);
  return results;
}

} // namespace actorch::test
