// tcp_store against the real things: PyTorch 1.13's TCPStore client on an actorch master and
// actorch's client on a PyTorch master (Debian's python3-torch), the 2.x numbering with its
// VALIDATE handshake, and strangers at the port (a 4 GiB length, garbage, idle connections, a
// burst), a master that never answers, a port in use, the listening address, the job secret.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "comm/store/job_crypto.hpp"
#include "comm/store/tcp_store.hpp"
#include "comm/store/tcp_store_server.hpp"
#include "comm/store/tcp_wire.hpp"
#include "tests/comm/ports.hpp"
#include "tests/core/files.hpp"
#include "tests/core/memory.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace std::chrono_literals;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;

namespace {

/// A raw TCP connection to 127.0.0.1:port, for speaking bytes a client library would not.
class raw_conn {
public:
  explicit raw_conn(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~raw_conn() { ::close(fd_); }
  raw_conn(const raw_conn&) = delete;
  raw_conn& operator=(const raw_conn&) = delete;

  void send(const std::string& bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  }
  /// `n` bytes, or fewer when the peer closed or nothing came within `timeout`.
  std::string recv(size_t n, std::chrono::milliseconds timeout = 2000ms) {
    std::string out;
    const auto deadline = clock_type::now() + timeout;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0)
        break;
      char buf[4096];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0)
        break;
      out.append(buf, size_t(got));
    }
    return out;
  }
  /// Whether the peer closed the connection within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout = 2000ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(timeout.count())) <= 0)
      return false;
    char b;
    return ::recv(fd_, &b, 1, 0) == 0;
  }

private:
  int fd_;
};

std::string request(wire::op o, wire::dialect d = wire::dialect::torch113) {
  std::string r;
  wire::put_u8(r, wire::code_of(o, d));
  return r;
}

std::filesystem::path scratch() {
  return actorch::test::scratch_dir("store_wire");
}

using actorch::test::env_var;
using actorch::test::silent_master;
} // namespace

TEST_CASE("PyTorch's own TCPStore client reads and writes an actorch master's store",
          "[comm][store][torch]") {
  tcp_store master("127.0.0.1", 0, true, 5s);
  master.set("from_actorch", std::string("hello\0world", 11));
  std::ofstream(scratch() / "port") << master.port();
  // torch.distributed.TCPStore as torch 1.13 ranks make it (world_size 2: it adds "init/").
  REQUIRE(actorch::test::run_python(scratch(), "torch_client", R"(
from datetime import timedelta
import torch.distributed as dist
port = int(open(d + '/port').read())
s = dist.TCPStore('127.0.0.1', port, 2, False, timedelta(seconds=10))
assert s.get('from_actorch') == b'hello\x00world', s.get('from_actorch')
s.set('from_torch', b'bytes\x00x')
assert s.add('counter', 5) == 5
assert s.compare_set('cas', '', 'new') == b'new'
assert s.compare_set('cas', 'wrong', 'other') == b'new'
s.wait(['from_torch'], timedelta(seconds=5))
assert s.delete_key('from_actorch')
assert not s.delete_key('from_actorch')
assert s.num_keys() == 4, s.num_keys()  # init/, from_torch, counter, cas
)") == 0);
  CHECK(master.get("from_torch") == std::string("bytes\0x", 7));
  CHECK(master.add("counter", 1) == 6);
  CHECK(master.get("cas") == "new");
  CHECK_FALSE(master.check({"from_actorch"}));
  CHECK(master.num_keys() == 4);
}

TEST_CASE("actorch's client joins a store that PyTorch hosts", "[comm][store][torch]") {
  const auto port_file = scratch() / "torch_master_port";
  std::filesystem::remove(port_file);
  // A PyTorch master on a free port: it writes the port, waits for our "done", checks what we
  // wrote and sets what we read.
  const std::string script = (scratch() / "torch_master.py").string();
  actorch::test::write_file(script, "d = r'" + scratch().string() + "'\n" + R"(
from datetime import timedelta
import os
import torch.distributed as dist
s = dist.TCPStore('127.0.0.1', 0, None, True, timedelta(seconds=20))
s.set('from_torch', b'torch\x00value')
tmp = d + '/torch_master_port.tmp'
open(tmp, 'w').write(str(s.port))
os.rename(tmp, d + '/torch_master_port')
s.wait(['done'], timedelta(seconds=20))
assert s.get('from_actorch') == b'written by actorch'
assert s.get('counter') == b'12'
assert s.num_keys() == 5, s.num_keys()  # from_torch, from_actorch, counter, cas, done
print('torch master: ok')
)");
  const std::string cmd = std::string("'") + ACTORCH_PYTHON + "' '" + script + "'";
  int master_status = -1; // checked on this thread: Catch's assertions are not thread-safe
  std::thread master([&] { master_status = std::system(cmd.c_str()); });
  const auto deadline = clock_type::now() + 20s;
  while (!std::filesystem::exists(port_file) && clock_type::now() < deadline)
    std::this_thread::sleep_for(20ms);
  REQUIRE(std::filesystem::exists(port_file));
  int port = 0;
  std::ifstream(port_file) >> port;
  {
    tcp_store client("127.0.0.1", uint16_t(port), false, 10s);
    CHECK(client.get("from_torch") == std::string("torch\0value", 11));
    client.set("from_actorch", "written by actorch");
    CHECK(client.add("counter", 10) == 10);
    CHECK(client.add("counter", 2) == 12);
    CHECK(client.compare_set("cas", "", "v1") == "v1");
    client.set("deleted", "x");
    CHECK(client.delete_key("deleted"));
    CHECK(client.check({"from_torch", "cas"}));
    CHECK(client.num_keys() >= 4);
    client.set("done", "1");
  }
  master.join();
  CHECK(master_status == 0);
}

TEST_CASE("the master speaks 2.x's numbering to a client that opens with VALIDATE",
          "[comm][store]") {
  tcp_store master("127.0.0.1", 0, true, 5s);
  SECTION("raw 2.x requests") {
    using wire::dialect;
    raw_conn c(master.port());
    std::string r = request(wire::op::validate, dialect::torch2);
    wire::put_int<uint32_t>(r, wire::validate_magic);
    r += request(wire::op::ping, dialect::torch2);
    wire::put_int<uint32_t>(r, 0xC0FFEE);
    r += request(wire::op::set, dialect::torch2);
    wire::put_str(r, "/k");
    wire::put_str(r, "v2");
    r += request(wire::op::get, dialect::torch2);
    wire::put_str(r, "/k");
    c.send(r);
    const std::string reply = c.recv(4 + 8 + 2);
    REQUIRE(reply.size() == 14);
    CHECK(wire::get_int<uint32_t>(reply.data()) == 0xC0FFEE);
    CHECK(reply.substr(12) == "v2");
    CHECK(master.get("k") == "v2");
    // 2.x's MULTI_GET, APPEND and CANCEL_WAIT.
    std::string m = request(wire::op::append, dialect::torch2);
    wire::put_str(m, "/k");
    wire::put_str(m, "+");
    m += request(wire::op::multi_get, dialect::torch2);
    wire::put_int<uint64_t>(m, 1);
    wire::put_str(m, "/k");
    m += request(wire::op::wait, dialect::torch2);
    wire::put_int<uint64_t>(m, 1);
    wire::put_str(m, "/never");
    m += request(wire::op::cancel_wait, dialect::torch2);
    c.send(m);
    const std::string more = c.recv(8 + 3 + 1);
    REQUIRE(more.size() == 12);
    CHECK(more.substr(8, 3) == "v2+");
    CHECK(uint8_t(more[11]) == wire::wait_canceled);
  }
  SECTION("actorch's client with ACTORCH_TCPSTORE_PROTOCOL=2") {
    env_var two("ACTORCH_TCPSTORE_PROTOCOL", "2");
    tcp_store client("127.0.0.1", master.port(), false, 5s);
    client.set("a", "1");
    CHECK(client.add("n", 3) == 3);
    CHECK(client.get("a") == "1");
    CHECK(master.get("a") == "1");
  }
  SECTION("a bad ACTORCH_TCPSTORE_PROTOCOL is refused, naming it") {
    env_var bad("ACTORCH_TCPSTORE_PROTOCOL", "3");
    REQUIRE_THROWS_WITH(tcp_store("127.0.0.1", master.port(), false, 1s),
                        Contains("ACTORCH_TCPSTORE_PROTOCOL is '3'"));
  }
}

TEST_CASE("strangers at the port never crash or stall the master", "[comm][store][hostile]") {
  tcp_store master("127.0.0.1", 0, true, 5s);
  tcp_store rank("127.0.0.1", master.port(), false, 5s);
  const auto rss_before = int64_t(actorch::test::status_bytes("VmRSS"));
  SECTION("a header claiming a 4 GiB key, three times") {
    for (int i = 0; i < 3; ++i) {
      raw_conn c(master.port());
      std::string r = request(wire::op::set);
      wire::put_int<uint64_t>(r, uint64_t(4) << 30);
      r.resize(32, 'x');
      c.send(r);
      CHECK(c.closed_by_peer());
    }
    // nothing near 4 GiB was allocated
    CHECK(int64_t(actorch::test::status_bytes("VmRSS")) - rss_before < (int64_t(256) << 20));
  }
  SECTION("garbage bytes") {
    std::mt19937 gen(7);
    for (int i = 0; i < 20; ++i) {
      raw_conn c(master.port());
      std::string junk(1024, '\0');
      for (char& ch : junk)
        ch = char(gen());
      c.send(junk);
      c.recv(1, 50ms); // whatever it answers, if anything
    }
  }
  SECTION("an idle connection, a partial request, and a burst of 300 connections") {
    raw_conn idle(master.port());
    raw_conn partial(master.port());
    std::string r = request(wire::op::set);
    wire::put_int<uint64_t>(r, 1000); // a key of 1000 bytes, of which 3 come
    partial.send(r + "abc");
    std::vector<std::unique_ptr<raw_conn>> burst;
    for (int i = 0; i < 300; ++i)
      burst.push_back(std::make_unique<raw_conn>(master.port()));
    const auto t0 = clock_type::now();
    rank.set("still", "served");
    CHECK(rank.get("still") == "served");
    CHECK(clock_type::now() - t0 < 1s);
  }
  // The rank's own connection kept working all along, and the master still serves.
  rank.set("after", "1");
  CHECK(master.get("after") == "1");
  CHECK(master.num_keys() >= 1);
}

TEST_CASE("at the connection cap, a stranger's idle connections make room for a rank",
          "[comm][store][hostile]") {
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_max = 512; // a cap of 128 connections (this test's process only)
  r.rlim_cur = 512;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &r) == 0);
  tcp_store_server server("127.0.0.1", 0, "");
  std::vector<std::unique_ptr<raw_conn>> idle;
  for (int i = 0; i < 200; ++i) // more than the cap: the oldest silent ones are evicted
    idle.push_back(std::make_unique<raw_conn>(server.port()));
  std::this_thread::sleep_for(200ms);
  CHECK(server.dropped() >= 72);
  tcp_store rank("127.0.0.1", server.port(), false, 2s); // joins, evicting an idle stranger
  rank.set("k", "v");
  CHECK(rank.get("k") == "v");
}

TEST_CASE("a master that accepted and went silent is an error within the timeout",
          "[comm][store]") {
  silent_master silent;
  const auto port = silent.port();
  tcp_store client("127.0.0.1", port, false, 300ms);
  auto t0 = clock_type::now();
  CHECK_THROWS_WITH(client.add("k", 1), Contains("the master at 127.0.0.1:" + std::to_string(port) +
                                                 " did not answer add('k') within 300 ms"));
  CHECK(clock_type::now() - t0 < 1s);
  t0 = clock_type::now();
  CHECK_THROWS_WITH(client.get("k"), Contains("timed out after 300 ms waiting for keys [k]"));
  CHECK(clock_type::now() - t0 < 1s);
}

TEST_CASE("a wait on a silent master ends within 1.25 times its timeout, however many keys",
          "[comm][store]") {
  // Asking which keys are missing after the wait timed out took a full timeout per key.
  silent_master silent;
  tcp_store client("127.0.0.1", silent.port(), false, 800ms);
  const auto t0 = clock_type::now();
  CHECK_THROWS_WITH(client.wait({"a", "b", "c"}, 800ms),
                    Contains("timed out after 800 ms waiting for keys [a, b, c]"));
  const auto took = clock_type::now() - t0;
  CHECK(took >= 800ms);
  CHECK(took < 1200ms); // 1.25 x 800 ms, and some slack
}

TEST_CASE("the master's address: MASTER_ADDR's own, and a port in use said so", "[comm][store]") {
  tcp_store master("127.0.0.1", 0, true, 2s);
  CHECK(master.listen_address() == "127.0.0.1"); // loopback only, not every interface
  REQUIRE_THROWS_WITH(tcp_store("127.0.0.1", master.port(), true, 1s),
                      Contains("cannot listen on 127.0.0.1:" + std::to_string(master.port()) +
                               ": address already in use"));
  tcp_store_server any("", 0, "");
  CHECK((any.listen_address() == "::" || any.listen_address() == "0.0.0.0"));
}

TEST_CASE("with a job secret, only connections that prove it may read or write",
          "[comm][store][secret]") {
  env_var secret("ACTORCH_JOB_TOKEN", "s3cret-for-this-job");
  tcp_store master("127.0.0.1", 0, true, 2s);
  tcp_store rank("127.0.0.1", master.port(), false, 2s);
  rank.set("k", "v");
  CHECK(master.get("k") == "v");
  SECTION("a client without the secret: its SET is dropped unwritten") {
    raw_conn c(master.port());
    std::string r = request(wire::op::set);
    wire::put_str(r, "/k");
    wire::put_str(r, "overwritten");
    c.send(r);
    CHECK(c.closed_by_peer());
    CHECK(master.get("k") == "v");
  }
  SECTION("a client with a wrong secret") {
    ::setenv("ACTORCH_JOB_TOKEN", "guess", 1);
    REQUIRE_THROWS_WITH(tcp_store("127.0.0.1", master.port(), false, 1s),
                        Contains("refused this rank's job secret (ACTORCH_JOB_TOKEN): it is "
                                 "another job's master on the same port"));
    ::setenv("ACTORCH_JOB_TOKEN", "s3cret-for-this-job", 1);
  }
  SECTION("a rank with a secret at a master without one: another job's, say") {
    ::unsetenv("ACTORCH_JOB_TOKEN");
    tcp_store open_master("127.0.0.1", 0, true, 2s);
    ::setenv("ACTORCH_JOB_TOKEN", "s3cret-for-this-job", 1);
    REQUIRE_THROWS_WITH(tcp_store("127.0.0.1", open_master.port(), false, 1s),
                        Contains("has no job secret, but this rank has one"));
  }
  SECTION("a rank without the secret is told it may need one") {
    ::unsetenv("ACTORCH_JOB_TOKEN");
    tcp_store client("127.0.0.1", master.port(), false, 1s);
    ::setenv("ACTORCH_JOB_TOKEN", "s3cret-for-this-job", 1);
    CHECK_THROWS_WITH(client.add("k", 1), Contains("closed the connection during add('k') "
                                                   "without answering") &&
                                              Contains("this rank has none (ACTORCH_JOB_TOKEN)"));
    CHECK(master.get("k") == "v");
  }
  SECTION("the proof is not the secret, and a replayed proof fails") {
    raw_conn c(master.port());
    c.send(request(wire::op::auth));
    const std::string nonce = c.recv(32);
    REQUIRE(nonce.size() == 32);
    const std::string proof = hmac_sha256("s3cret-for-this-job", nonce);
    CHECK(proof.find("s3cret") == std::string::npos);
    c.send(proof);
    CHECK(c.recv(1) == std::string(1, '\1'));
    raw_conn replay(master.port());
    replay.send(request(wire::op::auth));
    CHECK(replay.recv(32) != nonce);
    replay.send(proof);                            // the other connection's proof
    CHECK(replay.recv(1) == std::string(1, '\0')); // refused, said so,
    CHECK(replay.closed_by_peer());                // and dropped
  }
}
