// The master side of tcp_store: PyTorch's TCPStore server (TCPStoreMasterDaemon), one thread
// that polls every connection, so torch's clients (1.13 and 2.x) and actorch's share it. See
// Note [TCPStore protocol] and Note [Strangers at the port] in tcp_store_server.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace actorch::dist {

class tcp_store_server {
public:
  /// Listens on `host`'s address (every interface when host is empty or not an address of
  /// this machine, which it logs) at `port` (0: a free one). A non-empty `secret` makes every
  /// connection prove it knows it before any other request (Note [Job secret]). Throws
  /// actorch::error naming the address and the reason ("address already in use").
  tcp_store_server(const std::string& host, uint16_t port, std::string secret);
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

/// HMAC-SHA256 of `message` under `key` (32 bytes): the proof of Note [Job secret].
std::string hmac_sha256(const std::string& key, const std::string& message);

} // namespace actorch::dist
