// tcp_store: PyTorch's TCPStore protocol over plain sockets (Note [TCPStore protocol] in
// tcp_store_server.cpp). The master runs a tcp_store_server and talks to it as a client too;
// a client holds one connection, every request bounded by the store's timeout (poll before
// each read and write), so a master that accepted and then went silent (SIGSTOPped, wedged) is
// an error on time rather than a hang. A connection that breaks (a timeout, the master closing
// it) is dropped and the next request connects again.
#include "comm/store/tcp_store.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/fd_io.hpp"
#include "comm/store/job_crypto.hpp"
#include "comm/store/tcp_store_server.hpp"
#include "comm/store/tcp_wire.hpp"

namespace actorch::dist {

namespace {

using clock_type = std::chrono::steady_clock;
using wire::op;

/// The peer did not answer in time / closed the connection.
struct timed_out {};
struct closed {};

/// ACTORCH_TCPSTORE_PROTOCOL: "1.13" (the default: Debian's torch, torchrun's agent store) or
/// "2" (PyTorch 2.x masters, which want VALIDATE first).
wire::dialect client_dialect() {
  const auto v = env("ACTORCH_TCPSTORE_PROTOCOL");
  if (!v || *v == "1.13")
    return wire::dialect::torch113;
  ACTORCH_CHECK(*v == "2", "tcp_store: ACTORCH_TCPSTORE_PROTOCOL is '", *v,
                "'; expected 1.13 (torch 1.13's numbering) or 2 (PyTorch 2.x's, with VALIDATE)");
  return wire::dialect::torch2;
}

/// How long a timed-out wait may spend asking which of its keys are missing: a quarter of its
/// timeout, at most a second.
milliseconds follow_up_budget(milliseconds timeout) {
  return std::min<milliseconds>(timeout / 4, milliseconds(1000));
}

/// torch's client puts "/" before every key; so does ours, so both see the same keys.
std::string wire_key(const std::string& key) {
  return "/" + key;
}

std::string keys_request(const std::string& head, const std::vector<std::string>& keys) {
  std::string r = head;
  wire::put_int<uint64_t>(r, keys.size());
  for (const auto& k : keys)
    wire::put_str(r, wire_key(k));
  return r;
}

} // namespace

struct tcp_store::impl {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  wire::dialect dialect = wire::dialect::torch113;
  std::unique_ptr<tcp_store_server> server;
  // Idle connections. A request takes one (or opens one) and gives it back when it succeeds,
  // so a thread blocked in wait() does not hold up another thread's set().
  std::mutex mu;
  std::vector<int> idle;

  ~impl() {
    for (const int fd : idle)
      ::close(fd);
  }

  std::string where() const { return host + ":" + std::to_string(port); }

  // One attempt; -1 (errno kept) when refused or not answered by the deadline.
  int try_connect(clock_type::time_point deadline, std::string& last) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last = std::string("cannot resolve '") + host + "': " + ::gai_strerror(rc);
      return -1;
    }
    int out = -1;
    for (addrinfo* a = res; a != nullptr && out < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (s < 0)
        continue;
      if (::connect(s, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = errno_str(errno);
        ::close(s);
        continue;
      }
      pollfd p{s, POLLOUT, 0};
      const int ready = ::poll(&p, 1, poll_timeout_ms(deadline));
      int err = 0;
      socklen_t len = sizeof err;
      if (ready <= 0) {
        last = "no answer to the connection";
        ::close(s);
        continue;
      }
      ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = errno_str(err);
        ::close(s);
        continue;
      }
      const int one = 1;
      ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      out = s;
    }
    ::freeaddrinfo(res);
    return out;
  }

  // Connects (retrying while the master is not up yet: it may start after us) and says what
  // the master needs first: the proof of the job secret, the 2.x handshake.
  int connect(milliseconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    std::string last = "no attempt";
    int fd = -1;
    for (;;) {
      fd = try_connect(deadline, last);
      if (fd >= 0)
        break;
      if (clock_type::now() >= deadline)
        ACTORCH_FAIL("tcp_store: no master answered at ", where(), " within ", timeout.count(),
                     " ms (last error: ", last, ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    try {
      if (!secret.empty()) {
        std::string hello;
        wire::put_u8(hello, uint8_t(op::auth));
        send_all(fd, hello, deadline);
        std::string nonce;
        try {
          nonce = recv_exact(fd, 32, deadline);
        } catch (const closed&) {
          ::close(fd);
          ACTORCH_FAIL("tcp_store: the master at ", where(), " has no job secret, but this rank ",
                       "has one (ACTORCH_JOB_TOKEN): it is another job's master on the same ",
                       "port, or the ranks were not all given the secret");
        }
        send_all(fd, hmac_sha256(secret, nonce), deadline);
        std::string verdict;
        try {
          verdict = recv_exact(fd, 1, deadline);
        } catch (const closed&) {
        }
        if (verdict != std::string(1, '\1')) {
          ::close(fd);
          ACTORCH_FAIL("tcp_store: the master at ", where(), " refused this rank's job secret ",
                       "(ACTORCH_JOB_TOKEN): it is another job's master on the same port, or ",
                       "the ranks were given different secrets");
        }
      }
      if (dialect == wire::dialect::torch2) {
        std::string v;
        wire::put_u8(v, wire::code_of(op::validate, dialect));
        wire::put_int<uint32_t>(v, wire::validate_magic);
        send_all(fd, v, deadline);
      }
    } catch (const timed_out&) {
      ::close(fd);
      ACTORCH_FAIL("tcp_store: the master at ", where(), " accepted the connection but did not ",
                   "answer within ", timeout.count(), " ms");
    } catch (const closed&) {
      ::close(fd);
      ACTORCH_FAIL("tcp_store: the master at ", where(), " closed the connection while this ",
                   "rank was saying hello");
    }
    return fd;
  }

  // fd_io's outcome as this client's exceptions.
  static void moved(io_result r) {
    if (r == io_result::timed_out)
      throw timed_out{};
    if (r == io_result::closed)
      throw closed{};
  }
  static void send_all(int fd, const std::string& data, clock_type::time_point deadline) {
    moved(actorch::send_all(fd, data.data(), data.size(), deadline));
  }
  static std::string recv_exact(int fd, size_t want, clock_type::time_point deadline) {
    std::string out(want, '\0');
    moved(actorch::recv_all(fd, out.data(), want, deadline));
    return out;
  }

  template <class T> static T recv_int(int fd, clock_type::time_point deadline) {
    return wire::get_int<T>(recv_exact(fd, sizeof(T), deadline).data());
  }
  static std::string recv_str(int fd, clock_type::time_point deadline) {
    const auto n = recv_int<uint64_t>(fd, deadline);
    if (n > wire::max_value_bytes)
      throw closed{}; // not a reply of ours: the stream is out of step
    return recv_exact(fd, size_t(n), deadline);
  }

  /// Runs `body(fd, deadline)` (which sends a request and reads its reply) within `timeout`
  /// on an idle connection (or a new one); a failure closes that connection and throws
  /// naming `what` (on a timeout, `on_timeout` throws instead when given), a success gives
  /// it back.
  template <class Body>
  auto call(const std::string& what, milliseconds timeout, Body body,
            const std::function<void()>& on_timeout = {}) {
    int fd = -1;
    {
      std::lock_guard lock(mu);
      if (!idle.empty()) {
        fd = idle.back();
        idle.pop_back();
      }
    }
    if (fd < 0)
      fd = connect(timeout);
    const auto deadline = clock_type::now() + timeout;
    try {
      auto out = body(fd, deadline);
      std::lock_guard lock(mu);
      idle.push_back(fd);
      return out;
    } catch (const timed_out&) {
      ::close(fd); // a reply may still come: the stream is out of step
      if (on_timeout)
        on_timeout();
      ACTORCH_FAIL("tcp_store: the master at ", where(), " did not answer ", what, " within ",
                   timeout.count(), " ms (is it stopped, or gone?)");
    } catch (const closed&) {
      ::close(fd);
      ACTORCH_FAIL("tcp_store: the master at ", where(), " closed the connection during ", what,
                   " without answering: it drops a connection whose request breaks the protocol ",
                   "or one of its bounds, and its standard error (rank 0's log) says which",
                   what.starts_with("add(") ? " (for an ADD: a value at the key that is not an "
                                              "integer)"
                                            : "",
                   secret.empty() ? "; if it requires a job secret (actorch launch makes one), "
                                    "this rank has none (ACTORCH_JOB_TOKEN)"
                                  : "");
    }
  }

  std::string request(op o) const {
    std::string r;
    wire::put_u8(r, wire::code_of(o, dialect));
    return r;
  }

  /// CHECK: whether every key is set, answered within `timeout`.
  bool check(const std::vector<std::string>& keys, milliseconds timeout) {
    return call("check", timeout, [&](int fd, auto deadline) {
      send_all(fd, keys_request(request(op::check), keys), deadline);
      return recv_int<uint8_t>(fd, deadline) == wire::check_ready;
    });
  }
};

tcp_store::tcp_store(std::string host, uint16_t port, bool is_master, milliseconds timeout,
                     std::optional<std::string> secret)
    : store(timeout), impl_(std::make_unique<impl>()), host_(std::move(host)), port_(port),
      is_master_(is_master) {
  impl_->secret = secret ? *std::move(secret) : job_secret();
  impl_->dialect = client_dialect();
  if (is_master_) {
    impl_->server = std::make_unique<tcp_store_server>(host_, port_, impl_->secret);
    port_ = impl_->server->port();
  }
  impl_->host = host_.empty() ? "127.0.0.1" : host_;
  impl_->port = port_;
  impl_->idle.push_back(impl_->connect(timeout)); // fails here, naming the master, if none
}

tcp_store::~tcp_store() = default;

std::string tcp_store::listen_address() const {
  return impl_->server ? impl_->server->listen_address() : std::string();
}

void tcp_store::set(const std::string& key, const std::string& value) {
  impl_->call("set('" + key + "')", timeout(), [&](int fd, auto deadline) {
    std::string r = impl_->request(op::set);
    wire::put_str(r, wire_key(key));
    wire::put_str(r, value);
    impl_->send_all(fd, r, deadline);
    return 0;
  });
}

int64_t tcp_store::add(const std::string& key, int64_t delta) {
  return impl_->call("add('" + key + "')", timeout(), [&](int fd, auto deadline) {
    std::string r = impl_->request(op::add);
    wire::put_str(r, wire_key(key));
    wire::put_int<int64_t>(r, delta);
    impl_->send_all(fd, r, deadline);
    return impl_->recv_int<int64_t>(fd, deadline);
  });
}

std::string tcp_store::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  return impl_->call("compare_set('" + key + "')", timeout(), [&](int fd, auto deadline) {
    std::string r = impl_->request(op::compare_set);
    wire::put_str(r, wire_key(key));
    wire::put_str(r, expected);
    wire::put_str(r, desired);
    impl_->send_all(fd, r, deadline);
    return impl_->recv_str(fd, deadline);
  });
}

bool tcp_store::check(const std::vector<std::string>& keys) {
  return impl_->check(keys, timeout());
}

void tcp_store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  impl_->call(
      "wait", timeout,
      [&](int fd, auto deadline) {
        impl_->send_all(fd, keys_request(impl_->request(op::wait), keys), deadline);
        if (impl_->recv_int<uint8_t>(fd, deadline) != wire::wait_stop_waiting)
          throw closed{};
        return 0;
      },
      // The wait stays registered at the master: the connection was dropped with it. Which
      // keys are missing is asked within one short budget for all of them, not a timeout each:
      // a silent master then costs 1.25 times the timeout at most, not twice it (or once more
      // per key).
      [&] {
        const auto deadline = clock_type::now() + follow_up_budget(timeout);
        throw_timeout("tcp_store", keys, timeout, [&](const std::string& key) {
          const int left = poll_timeout_ms(deadline);
          if (left == 0)
            throw std::runtime_error("no time left");
          return impl_->check({key}, milliseconds(left));
        });
      });
}

bool tcp_store::delete_key(const std::string& key) {
  return impl_->call("delete_key('" + key + "')", timeout(), [&](int fd, auto deadline) {
    std::string r = impl_->request(op::delete_key);
    wire::put_str(r, wire_key(key));
    impl_->send_all(fd, r, deadline);
    return impl_->recv_int<int64_t>(fd, deadline) > 0;
  });
}

int64_t tcp_store::num_keys() {
  return impl_->call("num_keys", timeout(), [&](int fd, auto deadline) {
    impl_->send_all(fd, impl_->request(op::num_keys), deadline);
    return impl_->recv_int<int64_t>(fd, deadline);
  });
}

std::string job_secret() {
  if (auto t = env("ACTORCH_JOB_TOKEN"))
    return *t;
  const auto path = env("ACTORCH_JOB_TOKEN_FILE");
  if (!path)
    return {};
  std::ifstream in(*path);
  ACTORCH_CHECK(in.good(), "tcp_store: cannot read ACTORCH_JOB_TOKEN_FILE '", *path, "'");
  std::string line;
  std::getline(in, line);
  ACTORCH_CHECK(!line.empty(), "tcp_store: ACTORCH_JOB_TOKEN_FILE '", *path,
                "' is empty (its first line is the secret)");
  return line;
}

std::string tcp_store::get_now(const std::string& key) {
  return impl_->call("get('" + key + "')", timeout(), [&](int fd, auto deadline) {
    std::string r = impl_->request(op::get);
    wire::put_str(r, wire_key(key));
    impl_->send_all(fd, r, deadline);
    return impl_->recv_str(fd, deadline);
  });
}

} // namespace actorch::dist
