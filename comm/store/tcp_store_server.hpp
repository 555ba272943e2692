// The master side of tcp_store: PyTorch's TCPStore server (TCPStoreMasterDaemon), one thread
// that polls every connection, so torch's clients (1.13 and 2.x) and actorch's share it. See
// Note [TCPStore protocol] and Note [Strangers at the port] in tcp_store_server.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace actorch::dist {

/// What one master holds at most, whoever asks, a client that knows the job secret included
/// (Note [Store bounds] in tcp_store_server.cpp). A request past a bound is refused: the master
/// drops its connection and logs the bound by name.
struct tcp_store_limits {
  /// Keys and values together (ACTORCH_STORE_MAX_BYTES).
  uint64_t max_bytes = 1ull << 30;
  /// Keys (ACTORCH_STORE_MAX_KEYS).
  uint64_t max_keys = 1000000;
  /// Missing keys named by every pending WAIT together (ACTORCH_STORE_MAX_WAIT_KEYS).
  uint64_t max_wait_keys = 1000000;
  /// Replies built and not yet sent, every connection's together
  /// (ACTORCH_STORE_MAX_REPLY_BYTES); one connection's never pass 80 MiB.
  uint64_t max_reply_bytes = 1ull << 30;

  /// The defaults, with the variables above where they are set.
  static tcp_store_limits from_env();
};

class tcp_store_server {
public:
  /// Listens on `host`'s address (every interface when host is empty or not an address of
  /// this machine, which it logs) at `port` (0: a free one). A non-empty `secret` makes every
  /// connection prove it knows it before any other request (Note [Job secret]). Throws
  /// actorch::error naming the address and the reason ("address already in use").
  tcp_store_server(const std::string& host, uint16_t port, std::string secret,
                   tcp_store_limits limits = tcp_store_limits::from_env());
  ~tcp_store_server();
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  uint16_t port() const;
  /// The address it listens on, numeric ("127.0.0.1", "0.0.0.0", "::").
  std::string listen_address() const;
  /// Connections it accepted and kept so far, and those it refused or dropped (tests).
  int64_t accepted() const;
  int64_t dropped() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace actorch::dist
