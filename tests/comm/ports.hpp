// Ports for tests that start masters or expect none: a free one for a master to take, one
// held bound but not listening, so that connecting to it is refused and no other process (a
// test running in parallel) can start listening there, or one listening that nobody serves.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/launch/launcher.hpp"

namespace actorch::test {

// A free port for a master: dist::free_port() (comm/launch/launcher.hpp).

/// A TCP socket bound to a port the kernel picks on `address` (host order); its port in `port`.
inline int bound_socket(in_addr_t address, int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(address);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

/// Holds a port bound without listening for its lifetime: connections to it are refused.
class refused_port {
public:
  refused_port() : fd_(bound_socket(INADDR_ANY, port_)) {}
  ~refused_port() { ::close(fd_); }
  refused_port(const refused_port&) = delete;
  refused_port& operator=(const refused_port&) = delete;
  int port() const { return port_; }

private:
  int port_ = 0; // before fd_: bound_socket writes it while fd_ is initialised
  int fd_;
};

/// A listening socket nobody serves, for its lifetime: connections complete in its backlog, and
/// no byte ever comes (a master that accepted and went silent).
class silent_master {
public:
  silent_master() : fd_(bound_socket(INADDR_LOOPBACK, port_)) { ::listen(fd_, 16); }
  ~silent_master() { ::close(fd_); }
  silent_master(const silent_master&) = delete;
  silent_master& operator=(const silent_master&) = delete;
  uint16_t port() const { return uint16_t(port_); }

private:
  int port_ = 0; // before fd_: bound_socket writes it while fd_ is initialised
  int fd_;
};

} // namespace actorch::test
