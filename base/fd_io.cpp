// Whole transfers on a socket (fd_io.hpp).
#include "base/fd_io.hpp"

#include <algorithm>
#include <cerrno>

#include <poll.h>
#include <sys/socket.h>

namespace actorch {

namespace {

// Moves exactly n bytes through `io` (a send or a recv of fd), waiting for `events` in poll
// when the socket has nothing to give or no room.
template <class Io>
io_result move_all(int fd, char* p, size_t n, io_deadline deadline, short events, Io io) {
  while (n > 0) {
    const ssize_t r = io(p, n);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      return io_result::closed;
    pollfd pfd{fd, events, 0};
    int ready;
    while ((ready = ::poll(&pfd, 1, poll_timeout_ms(deadline))) < 0 && errno == EINTR) {
    }
    if (ready == 0)
      return io_result::timed_out;
    if (ready < 0)
      return io_result::closed;
  }
  return io_result::done;
}

} // namespace

int poll_timeout_ms(io_deadline deadline) {
  if (!deadline)
    return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
  return int(std::clamp<long long>(left.count(), 0, 1 << 30));
}

io_result send_all(int fd, const char* p, size_t n, io_deadline deadline) {
  return move_all(fd, const_cast<char*>(p), n, deadline, POLLOUT,
                  [fd](char* b, size_t k) { return ::send(fd, b, k, MSG_NOSIGNAL); });
}

io_result recv_all(int fd, char* p, size_t n, io_deadline deadline) {
  return move_all(fd, p, n, deadline, POLLIN,
                  [fd](char* b, size_t k) { return ::recv(fd, b, k, 0); });
}

} // namespace actorch
