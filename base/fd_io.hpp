// Whole transfers on a socket: the one home of the loops that carry on after a short send or
// recv and after EINTR (the store's client, a dataset worker's wire to its child process).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

namespace actorch {

enum class io_result {
  done,      // every byte moved
  closed,    // the peer closed or reset the connection, or another error
  timed_out, // the deadline passed first
};

using io_deadline = std::optional<std::chrono::steady_clock::time_point>;

/// poll(2)'s timeout for `deadline`: the milliseconds left, rounded up, 0 once it passed; -1
/// (for ever) without one.
int poll_timeout_ms(io_deadline deadline);

/// Sends exactly n bytes of p on socket fd, with MSG_NOSIGNAL (a peer that is gone is `closed`,
/// never SIGPIPE). On a non-blocking socket it waits in poll(2) for room until `deadline`
/// (nullopt: for ever); a blocking one blocks in send(2).
io_result send_all(int fd, const char* p, size_t n, io_deadline deadline = std::nullopt);

/// Receives exactly n bytes into p from socket fd; end of file before them is `closed`. Waits
/// as send_all does.
io_result recv_all(int fd, char* p, size_t n, io_deadline deadline = std::nullopt);

} // namespace actorch
