// The store behind env:// and tcp:// (c10d's TCPStore): rank 0 hosts it on MASTER_PORT, the
// other ranks connect to MASTER_ADDR:MASTER_PORT. Built on CAF's middleman: the master
// publishes a store actor, clients talk to it through remote_actor. CAF stays inside
// tcp_store.cpp; this header costs nothing to include.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/store/store.hpp"

namespace actorch::dist {

class tcp_store final : public store {
public:
  /// The master listens on `port` (0: a free port, see port()) on every interface; a client
  /// connects to host:port, retrying until `timeout` and then throwing actorch::error that
  /// names the address.
  tcp_store(std::string host, uint16_t port, bool is_master,
            milliseconds timeout = default_timeout);
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

protected:
  std::string get_now(const std::string& key) override;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string host_;
  uint16_t port_;
  bool is_master_;
};

} // namespace actorch::dist
