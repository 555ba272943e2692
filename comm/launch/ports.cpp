// port_reservation and free_port (launcher.hpp): ports for a job's MASTER_PORT on one host.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.hpp"
#include "comm/launch/launcher.hpp"

namespace actorch::dist {

namespace {

// The lowest port of the kernel's ephemeral range (what bind to port 0 and connect hand out).
int ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low ? low : 32768;
}

// A socket bound to `port` (0: the kernel's pick) on every IPv4 address without SO_REUSEADDR,
// which fails when anything at all holds the port, then marked SO_REUSEADDR so that a store's
// bind shares it (Note [Reserved ports]); -1 when the port is taken.
int reserve(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ACTORCH_CHECK(fd >= 0, "reserving a port: socket() failed: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int one = 1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

} // namespace

// Note [Ports below the ephemeral range]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A master's port is chosen before the master listens on it, and the ranks' store clients
// knock on it until it does. Were it one of the kernel's ephemeral ports, another job's
// socket could hold it meanwhile: Gloo's listening sockets are ephemeral, and this Gloo pairs
// a listener with the first connection it accepts, so a knock meant for a store takes the
// place of the Gloo peer, whose own connect is then refused ("connect [127.0.0.1]:40354:
// Connection refused" at a world of 32 beside other jobs, as a prober connecting to listening
// ports reproduces). So the port comes from the 8192 below that range,
// where the kernel never picks one on its own.
//
// Note [Reserved ports]
// ~~~~~~~~~~~~~~~~~~~~~
// Below the ephemeral range the kernel picks no port, but other jobs' masters do: a port found
// free by binding and closing a socket stayed free only until the rank 0 it was meant for
// bound it, seconds later (a rank importing Python, or under TSan), and a test started beside
// it could choose the same one meanwhile (and a launcher's rank 0 could not listen on the port
// it was given). So the port is held from its choice until its job ends, by a socket
// bound to it on every address and never listening. Linux lets a socket bind an address that
// others already hold when it and all of them set SO_REUSEADDR and none of them listens; the
// holder binds without the flag (so it fails against any other socket, another holder among
// them) and sets it afterwards. The store that listens there binds with the flag, as actorch's
// tcp_store and torch's TCPStore both do, and shares the port with its holder; every other
// bind fails, and a client's connect is refused until the store listens (as with nothing
// there). `actorch launch` holds its job's port across its restarts; free_port() holds it for
// the rest of the process (tests and benchmarks that start jobs with a port of their own).
port_reservation::port_reservation() {
  const int low = ephemeral_low();
  const int first = std::max(1024, low - 8192);
  if (low - first >= 1024) {
    std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> port(first, low - 1);
    for (int attempt = 0; attempt < 64 && fd_ < 0; ++attempt) {
      port_ = port(pick);
      fd_ = reserve(port_);
    }
  }
  if (fd_ < 0) {
    fd_ = reserve(0);
    ACTORCH_CHECK(fd_ >= 0, "reserving a port: binding a socket failed: ", std::strerror(errno));
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
}

port_reservation::~port_reservation() {
  if (fd_ >= 0)
    ::close(fd_);
}

port_reservation::port_reservation(port_reservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

port_reservation& port_reservation::operator=(port_reservation&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

int free_port() {
  static std::mutex mu;
  static std::vector<port_reservation> held; // Note [Reserved ports]: until the process exits
  port_reservation r;
  const int port = r.port();
  std::lock_guard lock(mu);
  held.push_back(std::move(r));
  return port;
}

} // namespace actorch::dist
