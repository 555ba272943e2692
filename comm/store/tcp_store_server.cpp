// tcp_store_server (tcp_store_server.hpp).
//
// Note [TCPStore protocol]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The store speaks PyTorch's TCPStore protocol (tcp_wire.hpp), so actorch ranks join a store
// that torchrun's agent or a PyTorch program hosts, and PyTorch tools read an actorch job's
// store. A connection's first bytes tell its numbering: 2.x clients open with VALIDATE (code 0)
// and the magic 0x3C85F7CE; anything else is torch 1.13's numbering (a 1.13 SET also starts
// with byte 0, but its next bytes are a key length far below the magic). Replies follow torch:
// SET, APPEND and MULTI_SET get none; WAIT's STOP_WAITING comes when the last missing key is
// written; a GET of a missing key, an ADD on a value that is not an integer, an unknown code or
// WATCH_KEY (not implemented) end the connection, as torch's server ends it, with a log line.
// Keys are stored as they arrive: torch's client prefixes "/" to every key, and so does ours.
//
// Note [Strangers at the port]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Anyone who reaches the port can connect, so nothing a connection sends may cost the master
// more than it bounds: the loop never blocks on one connection (non-blocking sockets, input
// parsed as it arrives, a partial request simply waits); every length is checked against
// tcp_wire.hpp's limits before anything is allocated for it, and the bytes all connections
// hold unparsed are bounded too; connections are capped (a quarter of the file-descriptor
// limit, which is raised to its hard maximum first), so idle ones cannot exhaust the
// descriptors the job needs for its checkpoints; at the cap, a new connection evicts the
// oldest one that never made a request, so strangers' idle connections cannot lock the
// ranks out either. What breaks a rule is dropped with a line
// on stderr naming the peer and the rule (at most 20 such lines a second, then a count).
//
// Note [Store bounds]
// ~~~~~~~~~~~~~~~~~~~
// Whoever may speak, a client that knows the job secret included, the master holds bounded
// memory and does bounded work per request (tcp_store_limits; docs/reliability.md):
// - the data: keys and values together, and the number of keys; a write past either is
//   refused (the connection dropped, the log naming the bound's variable);
// - replies: each is sized before it is built. One that could never be sent within a
//   connection's bound (80 MiB: the largest value and the backlog) or the master's
//   (ACTORCH_STORE_MAX_REPLY_BYTES, every connection's unsent replies together) is refused: a
//   MULTI_GET naming a 1 MiB key 2,000 times, say. One that fits only once the connection's
//   earlier replies have drained stalls the connection: its requests are neither read nor
//   handled until then, so pipelined GETs whose replies are never read hold one backlog, not
//   one reply each;
// - pending WAITs: indexed by missing key, so a write touches only the waits for its key, and
//   the keys they name together are bounded (ACTORCH_STORE_MAX_WAIT_KEYS).
//
// Note [Job secret]
// ~~~~~~~~~~~~~~~~~
// With ACTORCH_JOB_TOKEN (or ACTORCH_JOB_TOKEN_FILE) set, a connection's first request must
// be AUTH (code 0xA7, outside torch's numbering): the master answers 32 random bytes, the
// client answers HMAC-SHA256(secret, those bytes), and only a correct proof lets it read or
// write a key. The secret never crosses the wire, and a recorded proof is useless for another
// connection. It keeps out whoever does not know the secret; it does not encrypt the traffic,
// authenticate the master to the clients, or protect Gloo's own connections (docs/reliability.md).
#include "comm/store/tcp_store_server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"
#include "comm/host_identity.hpp"
#include "comm/store/hash_store.hpp"
#include "comm/store/job_crypto.hpp"
#include "comm/store/tcp_wire.hpp"

namespace actorch::dist {

namespace {

using wire::op;

/// A request that breaks the protocol or a bound: the connection is dropped with `what`.
struct violation {
  std::string what;
};

/// Parses one request from the front of a buffer; need() says whether the bytes are there yet.
class cursor {
public:
  /// Reads `in` from `start` on.
  cursor(const std::string& in, size_t start) : in_(in), start_(start), pos_(start) {}
  bool need(size_t n) const { return in_.size() - pos_ >= n; }
  /// Bytes read since `start`.
  size_t pos() const { return pos_ - start_; }
  uint8_t u8() { return uint8_t(in_[pos_++]); }
  void skip(size_t n) { pos_ += n; }
  template <class T> T integer() {
    const T v = wire::get_int<T>(in_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  /// A length-prefixed string of at most `limit` bytes; false when not all there yet.
  bool str(std::string& out, uint64_t limit, const char* what) {
    if (!need(8))
      return false;
    const auto n = wire::get_int<uint64_t>(in_.data() + pos_);
    if (n > limit)
      throw violation{std::string("a ") + what + " of " + std::to_string(n) +
                      " bytes (the limit is " + std::to_string(limit) + ")"};
    if (!need(8 + n))
      return false;
    out.assign(in_.data() + pos_ + 8, size_t(n));
    pos_ += 8 + n;
    return true;
  }
  /// A u64 count of at most `limit`; false when not all there yet.
  bool count(uint64_t& out, uint64_t limit, const char* what) {
    if (!need(8))
      return false;
    out = integer<uint64_t>();
    if (out > limit)
      throw violation{std::to_string(out) + " " + what + " in one request (the limit is " +
                      std::to_string(limit) + ")"};
    return true;
  }

private:
  const std::string& in_;
  size_t start_;
  size_t pos_;
};

struct connection {
  int fd = -1;
  std::string peer;
  std::string in, out;
  size_t head = 0; // bytes of `in` handled; erased once per read, not once per request
  bool dialect_known = false;
  wire::dialect dialect = wire::dialect::torch113;
  bool authed = false;
  std::string nonce;    // sent, awaiting the proof
  bool spoke = false;   // it has made a complete request (after the proof, with a job secret)
  bool stalled = false; // its next reply does not fit yet: not read until its replies drain
  size_t counted = 0;   // bytes of `out` counted in the master's unsent total
  std::vector<std::unique_ptr<struct pending_wait>> waits;
};

/// A WAIT not answered yet: the keys it still misses. Note [Store bounds].
struct pending_wait {
  connection* c = nullptr;
  std::vector<std::string> keys; // the missing keys, each once
  size_t missing = 0;            // of them, those not written yet
};

/// Raises the soft descriptor limit to the hard one; a quarter of it is the connection cap.
size_t connection_cap() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    ::getrlimit(RLIMIT_NOFILE, &r);
  }
  const rlim_t soft = r.rlim_cur == RLIM_INFINITY ? 65536 : r.rlim_cur;
  return std::clamp<size_t>(size_t(soft / 4), 64, 16384);
}

/// All connections' unparsed bytes together stay below this.
constexpr size_t kMaxBufferedBytes = 512ull << 20;
// Unsent replies past which a connection's requests are not read (see serve).
constexpr size_t kMaxReplyBacklog = 16ull << 20;
// One connection's unsent replies never pass this: the largest value's reply, and the backlog.
constexpr size_t kMaxConnectionReplies = wire::max_value_bytes + 8 + kMaxReplyBacklog;

uint64_t limit_from_env(const char* name, uint64_t fallback) {
  return uint64_t(env_int(name, int64_t(fallback), 1, int64_t(1) << 50));
}

} // namespace

struct tcp_store_server::impl {
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  uint16_t port = 0;
  std::string address;
  std::string secret;
  size_t cap = 0;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> accepted{0}, dropped{0};
  std::thread loop_thread;

  tcp_store_limits limits;
  std::map<std::string, std::string> data;
  uint64_t data_bytes = 0; // keys and values of `data` together
  std::vector<std::unique_ptr<connection>> conns;
  size_t buffered = 0;
  size_t unsent = 0; // every connection's counted unsent replies
  // Note [Store bounds]
  // ~~~~~~~~~~~~~~~~~~~
  // The pending waits by missing key, and how many keys they name.
  std::unordered_map<std::string, std::vector<pending_wait*>> waiting;
  uint64_t wait_keys = 0;
  std::vector<std::string> fresh_keys; // added by the request being handled

  // Note [Strangers at the port]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Rate-limited log lines.
  std::chrono::steady_clock::time_point log_window{};
  int logged_in_window = 0, suppressed = 0;

  void log(const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    if (now - log_window > std::chrono::seconds(1)) {
      if (suppressed > 0)
        std::fprintf(stderr, "tcp_store: (%d more such lines suppressed)\n", suppressed);
      log_window = now;
      logged_in_window = suppressed = 0;
    }
    if (++logged_in_window > 20) {
      ++suppressed;
      return;
    }
    // A line quotes what a peer sent (a key, a value): at most 300 bytes of it.
    std::fprintf(stderr, "tcp_store: %.300s%s\n", line.c_str(), line.size() > 300 ? "..." : "");
  }

  void listen_on(const std::string& host, uint16_t want_port) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    hints.ai_family = AF_UNSPEC;
    addrinfo* res = nullptr;
    const std::string port_s = std::to_string(want_port);
    const int rc =
        ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
    ACTORCH_CHECK(rc == 0, "tcp_store: cannot resolve the master address '", host,
                  "': ", ::gai_strerror(rc));
    std::string last_error;
    bool not_local = false;
    for (addrinfo* a = res; a != nullptr && listen_fd < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0)
        continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) {
        const int zero = 0; // dual-stack when listening on "::"
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      }
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
        not_local = not_local || errno == EADDRNOTAVAIL;
        last_error = errno == EADDRINUSE ? "address already in use (another process, another job's "
                                           "rank 0 perhaps, holds the "
                                           "port: choose another MASTER_PORT)"
                                         : errno_str(errno);
        ::close(fd);
        continue;
      }
      if (::listen(fd, 2048) != 0) {
        last_error = errno_str(errno);
        ::close(fd);
        continue;
      }
      listen_fd = fd;
    }
    ::freeaddrinfo(res);
    if (listen_fd < 0 && not_local && !host.empty()) {
      // MASTER_ADDR names no address of this machine (a NAT, a DNS alias): every interface.
      log("'" + host + "' is not an address of this machine; listening on every interface");
      listen_on("", want_port);
      return;
    }
    ACTORCH_CHECK(listen_fd >= 0, "tcp_store: the master cannot listen on ",
                  host.empty() ? "*" : host, ":", want_port, ": ", last_error);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
    std::tie(address, port) = numeric_endpoint(bound);
  }

  /// Closes connection i; `why` (empty for a peer that closed it) goes to the log.
  void drop(size_t i, const std::string& why) {
    connection& c = *conns[i];
    if (!why.empty()) {
      log("dropped the connection from " + c.peer + ": " + why);
      ++dropped;
    }
    buffered -= c.in.size() - c.head;
    unsent -= c.counted;
    cancel_waits(c);
    ::close(c.fd);
    conns.erase(conns.begin() + std::ptrdiff_t(i));
  }

  /// Counts what was added to or sent from c.out since it was last counted.
  void recount(connection& c) {
    unsent = unsent - c.counted + c.out.size();
    c.counted = c.out.size();
  }

  // Note [Store bounds]
  // ~~~~~~~~~~~~~~~~~~~
  // Whether a reply of n more bytes fits now. A reply that can never fit
  // is refused; one that fits once the connection's replies drain stalls it (false) until then.
  bool room_for(connection& c, size_t n, const char* what) {
    if (n > kMaxConnectionReplies || n > limits.max_reply_bytes)
      throw violation{
          std::string("a ") + what + " whose reply of " + std::to_string(n) +
          " bytes is more than the master sends one connection at once (" +
          std::to_string(std::min<uint64_t>(kMaxConnectionReplies, limits.max_reply_bytes)) +
          " bytes)"};
    const size_t pending = unsent - c.counted + c.out.size();
    if (c.out.size() + n <= kMaxConnectionReplies && pending + n <= limits.max_reply_bytes)
      return true;
    c.stalled = true;
    return false;
  }

  /// Stores `value` under `key` within the bounds, and answers the waits it completes.
  void put(const std::string& key, std::string value) {
    auto it = data.find(key);
    const bool fresh = it == data.end();
    if (fresh && data.size() >= limits.max_keys)
      throw violation{"a new key '" + key + "', but the store holds " +
                      std::to_string(data.size()) + " keys, its bound (ACTORCH_STORE_MAX_KEYS)"};
    const uint64_t before = fresh ? 0 : key.size() + it->second.size();
    const uint64_t after = data_bytes - before + key.size() + value.size();
    if (after > limits.max_bytes)
      throw violation{"a write of " + std::to_string(value.size()) + " bytes to '" + key +
                      "' that would make the store hold " + std::to_string(after) +
                      " bytes, more than its bound of " + std::to_string(limits.max_bytes) +
                      " (ACTORCH_STORE_MAX_BYTES)"};
    data_bytes = after;
    if (!fresh) {
      it->second = std::move(value);
      return;
    }
    data.emplace(key, std::move(value));
    fresh_keys.push_back(key); // its waits are answered after this request's reply (deliver)
  }

  /// Removes `key`; false when it was not there.
  bool erase(const std::string& key) {
    auto it = data.find(key);
    if (it == data.end())
      return false;
    data_bytes -= key.size() + it->second.size();
    data.erase(it);
    return true;
  }

  // See Note [TCPStore protocol]: the keys the last request added answer the waits they were
  // the last ones missing of.
  void deliver() {
    for (const auto& k : fresh_keys)
      written(k);
    fresh_keys.clear();
  }

  void written(const std::string& key) {
    auto it = waiting.find(key);
    if (it == waiting.end())
      return;
    const std::vector<pending_wait*> ready = std::move(it->second);
    waiting.erase(it);
    for (pending_wait* w : ready) {
      if (--w->missing > 0)
        continue;
      connection& c = *w->c;
      wire::put_u8(c.out, wire::wait_stop_waiting);
      recount(c);
      wait_keys -= w->keys.size();
      std::erase_if(c.waits, [&](const auto& p) { return p.get() == w; });
    }
  }

  /// Forgets c's pending waits (CANCEL_WAIT, or the connection went).
  void cancel_waits(connection& c) {
    for (const auto& w : c.waits) {
      wait_keys -= w->keys.size();
      for (const auto& k : w->keys) {
        auto it = waiting.find(k);
        if (it == waiting.end())
          continue; // written already
        std::erase(it->second, w.get());
        if (it->second.empty())
          waiting.erase(it);
      }
    }
    c.waits.clear();
  }

  /// Registers a WAIT of c for `keys`, answering it at once when none is missing.
  void add_wait(connection& c, const std::vector<std::string>& keys) {
    auto w = std::make_unique<pending_wait>();
    w->c = &c;
    std::unordered_set<std::string_view> seen; // a key named twice is waited for once
    for (const auto& k : keys)
      if (!data.contains(k) && seen.insert(k).second)
        w->keys.push_back(k);
    if (w->keys.empty()) {
      wire::put_u8(c.out, wire::wait_stop_waiting);
      return;
    }
    if (wait_keys + w->keys.size() > limits.max_wait_keys)
      throw violation{"a WAIT for " + std::to_string(w->keys.size()) +
                      " missing keys while the pending waits name " + std::to_string(wait_keys) +
                      ", and their bound is " + std::to_string(limits.max_wait_keys) +
                      " (ACTORCH_STORE_MAX_WAIT_KEYS)"};
    wait_keys += w->keys.size();
    w->missing = w->keys.size();
    for (const auto& k : w->keys)
      waiting[k].push_back(w.get());
    c.waits.push_back(std::move(w));
  }

  // At the cap, the oldest connection that never made a request makes room (a stranger's idle
  // connection, or torch 1.13's unused second one); false when every one has spoken.
  bool evict_silent() {
    for (size_t i = 0; i < conns.size(); ++i)
      if (!conns[i]->spoke) {
        drop(i, "it never made a request, and the connection cap is reached");
        return true;
      }
    return false;
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd =
          ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        return; // EAGAIN, or a connection that went away before we took it
      if (conns.size() >= cap && !evict_silent()) {
        log("refused a connection from " + endpoint_text(a) + ": " + std::to_string(conns.size()) +
            " connections are open, the cap, and each has made a request");
        ++dropped;
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<connection>();
      c->fd = fd;
      c->peer = endpoint_text(a);
      c->authed = secret.empty();
      conns.push_back(std::move(c));
      ++accepted;
    }
  }

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return data.contains(k); });
  }

  bool read_keys(cursor& in, std::vector<std::string>& keys) {
    uint64_t n = 0;
    if (!in.count(n, wire::max_keys_per_request, "keys"))
      return false;
    keys.resize(size_t(n));
    for (auto& k : keys)
      if (!in.str(k, wire::max_key_bytes, "key"))
        return false;
    return true;
  }

  /// Handles one request from c.in at c.head; false when it is not all there yet.
  bool handle_one(connection& c) {
    cursor in(c.in, c.head);
    if (!in.need(1))
      return false;
    // Note [Job secret]
    // ~~~~~~~~~~~~~~~~~
    // Nothing but the proof until it is given.
    if (!c.authed) {
      if (c.nonce.empty()) {
        if (in.u8() != uint8_t(op::auth))
          throw violation{"it sent a request without proving it knows the job secret "
                          "(ACTORCH_JOB_TOKEN)"};
        c.nonce = random_bytes(32, "tcp_store's challenge");
        c.out += c.nonce;
      } else {
        if (!in.need(32))
          return false;
        const std::string proof = c.in.substr(c.head, 32);
        in.skip(32);
        const std::string want = hmac_sha256(secret, c.nonce);
        if (!proofs_equal(proof, want)) {
          // The verdict byte 0 tells an actorch client that its secret was wrong (not that
          // the master went away); best effort, as the connection is dropped right after.
          const char no = 0;
          [[maybe_unused]] const ssize_t sent = ::send(c.fd, &no, 1, MSG_NOSIGNAL);
          throw violation{"a wrong proof of the job secret (a rank of another job on this "
                          "port, or one given another secret)"};
        }
        c.authed = true;
        wire::put_u8(c.out, 1);
      }
      consume(c, in.pos());
      return true;
    }
    if (!c.dialect_known) {
      if (uint8_t(c.in[c.head]) == 0) { // 2.x's VALIDATE, or 1.13's SET
        if (!in.need(5))
          return false;
        if (wire::get_int<uint32_t>(c.in.data() + c.head + 1) == wire::validate_magic) {
          c.dialect = wire::dialect::torch2;
          c.dialect_known = true;
          consume(c, 5);
          return true;
        }
      }
      c.dialect_known = true; // 1.13's numbering
    }
    op o{};
    const uint8_t code = in.u8();
    if (!wire::op_of(code, c.dialect, o))
      throw violation{"unknown request code " + std::to_string(code)};
    std::string key, a, b;
    std::vector<std::string> keys;
    switch (o) {
    case op::validate: throw violation{"VALIDATE after the first request"};
    case op::auth:
      throw violation{secret.empty() ? "AUTH, but this store has no job secret (a rank of "
                                       "another job on this port, or one given a secret the "
                                       "master was not)"
                                     : "a second AUTH on a connection that proved the job "
                                       "secret already"};
    case op::watch_key: throw violation{"WATCH_KEY, which actorch's store does not implement"};
    case op::set:
    case op::append:
      if (!in.str(key, wire::max_key_bytes, "key") || !in.str(a, wire::max_value_bytes, "value"))
        return false;
      consume(c, in.pos());
      if (o == op::append)
        if (auto it = data.find(key); it != data.end()) {
          if (it->second.size() + a.size() > wire::max_value_bytes)
            throw violation{"an APPEND that would make '" + key + "' longer than " +
                            std::to_string(wire::max_value_bytes) + " bytes"};
          a = it->second + a;
        }
      put(key, std::move(a));
      return true;
    case op::compare_set: {
      if (!in.str(key, wire::max_key_bytes, "key") || !in.str(a, wire::max_value_bytes, "value") ||
          !in.str(b, wire::max_value_bytes, "value"))
        return false;
      // torch's rule: `desired` when the key holds `expected` (or is absent and `expected` is
      // empty); the answer is the value the key holds then, `expected` for an absent key.
      auto it = data.find(key);
      const bool swap = it == data.end() ? a.empty() : it->second == a;
      const std::string& answer = swap ? b : it == data.end() ? a : it->second;
      if (!room_for(c, 8 + answer.size(), "COMPARE_SET"))
        return false;
      consume(c, in.pos());
      wire::put_str(c.out, answer);
      if (swap)
        put(key, std::move(b));
      return true;
    }
    case op::get: {
      if (!in.str(key, wire::max_key_bytes, "key"))
        return false;
      auto it = data.find(key);
      if (it == data.end())
        throw violation{"GET of key '" + key + "', which is not set (clients WAIT first)"};
      if (!room_for(c, 8 + it->second.size(), "GET"))
        return false;
      consume(c, in.pos());
      wire::put_str(c.out, it->second);
      return true;
    }
    case op::add: {
      if (!in.str(key, wire::max_key_bytes, "key") || !in.need(8))
        return false;
      const auto delta = in.integer<int64_t>();
      auto it = data.find(key);
      // A value that is not an integer throws: serve() drops the connection with the message.
      const int64_t v = (it == data.end() ? 0 : parse_counter(key, it->second)) + delta;
      consume(c, in.pos());
      wire::put_int<int64_t>(c.out, v);
      put(key, std::to_string(v));
      return true;
    }
    case op::check:
    case op::wait:
      if (!read_keys(in, keys))
        return false;
      consume(c, in.pos());
      if (o == op::check)
        wire::put_u8(c.out, has_all(keys) ? wire::check_ready : wire::check_not_ready);
      else
        add_wait(c, keys);
      return true;
    case op::num_keys:
      consume(c, in.pos());
      wire::put_int<int64_t>(c.out, int64_t(data.size()));
      return true;
    case op::delete_key:
      if (!in.str(key, wire::max_key_bytes, "key"))
        return false;
      consume(c, in.pos());
      wire::put_int<int64_t>(c.out, erase(key) ? 1 : 0);
      return true;
    case op::multi_get: {
      if (!read_keys(in, keys))
        return false;
      size_t reply = 0;
      for (const auto& k : keys) {
        auto it = data.find(k);
        if (it == data.end())
          throw violation{"MULTI_GET of key '" + k + "', which is not set"};
        reply += 8 + it->second.size();
      }
      if (!room_for(c, reply, "MULTI_GET"))
        return false;
      consume(c, in.pos());
      for (const auto& k : keys)
        wire::put_str(c.out, data.at(k));
      return true;
    }
    case op::multi_set: {
      uint64_t n = 0;
      if (!in.count(n, wire::max_keys_per_request, "keys"))
        return false;
      std::vector<std::pair<std::string, std::string>> kvs{size_t(n)};
      for (auto& [k, v] : kvs)
        if (!in.str(k, wire::max_key_bytes, "key") || !in.str(v, wire::max_value_bytes, "value"))
          return false;
      consume(c, in.pos());
      for (auto& [k, v] : kvs)
        put(k, std::move(v));
      return true;
    }
    case op::cancel_wait:
      consume(c, in.pos());
      cancel_waits(c);
      wire::put_u8(c.out, wire::wait_canceled);
      return true;
    case op::ping: {
      if (!in.need(4))
        return false;
      const auto nonce = in.integer<uint32_t>();
      consume(c, in.pos());
      wire::put_int<uint32_t>(c.out, nonce);
      return true;
    }
    }
    throw violation{"unknown request code " + std::to_string(code)};
  }

  void consume(connection& c, size_t n) {
    c.head += n;
    buffered -= n;
  }

  // Handles every complete request c holds, until one's reply must wait for room (Note [Store
  // bounds]); false when c must be dropped (`why` says why).
  bool process(connection& c, std::string& why) {
    bool ok = true;
    try {
      while (handle_one(c)) {
        c.spoke = c.authed; // the challenge alone does not count
        recount(c);
        deliver();
      }
      recount(c);
    } catch (const violation& v) {
      why = v.what;
      ok = false;
    } catch (const std::exception& e) {
      why = e.what();
      ok = false;
    }
    if (!ok) {
      deliver(); // what the failed request stored before its violation stays stored
      return false;
    }
    c.in.erase(0, c.head);
    c.head = 0;
    return true;
  }

  // Reads what `c` sent and handles every complete request; false when it must be dropped
  // (`why` says why), or when it closed.
  bool serve(connection& c, std::string& why) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n == 0) {
        why.clear(); // it closed: nothing to log
        return false;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          break;
        if (errno == EINTR)
          continue;
        why = errno_str(errno);
        return false;
      }
      if (buffered + size_t(n) > kMaxBufferedBytes) {
        why = "the master holds " + std::to_string(buffered) +
              " bytes of unparsed requests already (the bound for all connections)";
        return false;
      }
      c.in.append(buf, size_t(n));
      buffered += size_t(n);
      if (!process(c, why))
        return false;
      // Replies it does not read: stop reading its requests until they drain (loop() polls
      // it for input again then), so a client that pipelines and never reads holds at most
      // kMaxReplyBacklog and a chunk's replies.
      if (size_t(n) < sizeof buf || c.stalled || c.out.size() > kMaxReplyBacklog)
        break;
    }
    return true;
  }

  bool flush(connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        recount(c);
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      }
      c.out.erase(0, size_t(n));
    }
    recount(c);
    return true;
  }

  void loop() {
    std::vector<pollfd> fds;
    while (!stop.load()) {
      fds.clear();
      fds.push_back({wake_pipe[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (const auto& c : conns)
        fds.push_back({c->fd,
                       short((c->stalled || c->out.size() > kMaxReplyBacklog ? 0 : POLLIN) |
                             (c->out.empty() ? 0 : POLLOUT)),
                       0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR)
        break;
      if (fds[0].revents != 0)
        break; // stop
      // Connections first (their indices match fds from 2 on), newest last; then accept.
      for (size_t i = fds.size() - 1; i >= 2; --i) {
        const size_t ci = i - 2;
        connection& c = *conns[ci];
        std::string why = "it hung up";
        bool keep = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
          keep = serve(c, why);
        if (keep && !flush(c)) {
          keep = false;
          why = "it stopped reading its replies";
        }
        if (!keep)
          drop(ci, why);
      }
      // A write by one connection may complete another's wait: flush them all. A stalled
      // connection whose replies drained handles the requests it holds (Note [Store bounds]).
      for (size_t i = conns.size(); i-- > 0;) {
        connection& c = *conns[i];
        std::string why = "it stopped reading its replies";
        bool keep = flush(c);
        if (keep && c.stalled && c.out.empty()) {
          c.stalled = false;
          keep = process(c, why) && flush(c);
        }
        if (!keep)
          drop(i, why);
      }
      if (fds[1].revents & POLLIN)
        accept_all();
    }
  }
};

tcp_store_limits tcp_store_limits::from_env() {
  tcp_store_limits l;
  l.max_bytes = limit_from_env("ACTORCH_STORE_MAX_BYTES", l.max_bytes);
  l.max_keys = limit_from_env("ACTORCH_STORE_MAX_KEYS", l.max_keys);
  l.max_wait_keys = limit_from_env("ACTORCH_STORE_MAX_WAIT_KEYS", l.max_wait_keys);
  l.max_reply_bytes = limit_from_env("ACTORCH_STORE_MAX_REPLY_BYTES", l.max_reply_bytes);
  return l;
}

tcp_store_server::tcp_store_server(const std::string& host, uint16_t port, std::string secret,
                                   tcp_store_limits limits)
    : impl_(std::make_unique<impl>()) {
  impl_->secret = std::move(secret);
  impl_->limits = limits;
  impl_->cap = connection_cap();
  impl_->listen_on(host, port);
  ACTORCH_CHECK(::pipe2(impl_->wake_pipe, O_CLOEXEC) == 0, "tcp_store: pipe: ", errno_str(errno));
  impl_->loop_thread = std::thread([this] { impl_->loop(); });
}

tcp_store_server::~tcp_store_server() {
  impl_->stop = true;
  const char b = 1;
  if (::write(impl_->wake_pipe[1], &b, 1) < 0) {
    // The loop also ends on its next wake-up; nothing else to do here.
  }
  if (impl_->loop_thread.joinable())
    impl_->loop_thread.join();
  for (auto& c : impl_->conns)
    ::close(c->fd);
  ::close(impl_->listen_fd);
  ::close(impl_->wake_pipe[0]);
  ::close(impl_->wake_pipe[1]);
}

uint16_t tcp_store_server::port() const {
  return impl_->port;
}
std::string tcp_store_server::listen_address() const {
  return impl_->address;
}
int64_t tcp_store_server::accepted() const {
  return impl_->accepted.load();
}
int64_t tcp_store_server::dropped() const {
  return impl_->dropped.load();
}

} // namespace actorch::dist
