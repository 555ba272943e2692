// The store behind env:// and tcp:// (c10d's TCPStore): rank 0 hosts it on MASTER_PORT, the
// other ranks connect to MASTER_ADDR:MASTER_PORT. It speaks PyTorch's TCPStore protocol, so
// actorch ranks join a store that torchrun's agent or a PyTorch program hosts, and PyTorch
// clients read an actorch job's store (Note [TCPStore protocol] in tcp_store_server.cpp).
// Environment: ACTORCH_JOB_TOKEN / ACTORCH_JOB_TOKEN_FILE (a job secret every connection must
// prove it knows, Note [Job secret]); ACTORCH_TCPSTORE_PROTOCOL=2 for a PyTorch 2.x master
// (the client's default is torch 1.13's numbering; the master understands both).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/store/store.hpp"

namespace actorch::dist {

class tcp_store final : public store {
public:
  /// The master listens on `host`'s address (every interface when `host` is empty or not an
  /// address of this machine) at `port` (0: a free port, see port()); every rank, the master
  /// included, connects to host:port, retrying until `timeout` and then throwing
  /// actorch::error that names the address. Every request is answered within `timeout` or
  /// fails naming the master. `secret`: the job secret to prove (and, on the master, to
  /// require); nullopt: this process's job_secret().
  tcp_store(std::string host, uint16_t port, bool is_master, milliseconds timeout = default_timeout,
            std::optional<std::string> secret = std::nullopt);
  ~tcp_store() override;

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  /// The port the master listens on (the chosen one when constructed with 0).
  uint16_t port() const { return port_; }
  bool is_master() const { return is_master_; }
  /// The master's listening address ("127.0.0.1", "::"); empty on a client.
  std::string listen_address() const;

protected:
  std::string get_now(const std::string& key) override;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string host_;
  uint16_t port_;
  bool is_master_;
};

/// The job secret of this process: ACTORCH_JOB_TOKEN, or the first line of the file
/// ACTORCH_JOB_TOKEN_FILE names; empty when neither is set. Throws when the file cannot be read.
std::string job_secret();

} // namespace actorch::dist
