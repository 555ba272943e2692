// The Gloo group's full mesh (pair_mesh.hpp): Gloo's pairs, connected and checked here instead
// of by Gloo's connectFullMesh, which cannot remake one pair.
//
// Note [Gloo pair checks]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Each Gloo pair listens on a port of its own and accepts the first connection to reach it
// (Debian's Gloo is prebuilt: its handshake cannot change), then closes the port. A local
// process that connects first, even one that only writes 8 bytes, takes the peer's place: the
// peer's own connect is refused or reset, and Gloo's connectFullMesh offers no way to drop
// that pair and listen again, so the whole rendezvous failed. connect_mesh therefore makes the
// pairs itself and, once a pair is connected, each rank writes to the store the two ends of
// the TCP connection it holds (its socket's local address and its peer's), or why it has none,
// and reads the peer's. The pair joins the two ranks when each side's peer is the other's
// local end; both sides judge that from the same two records, so they agree. A pair that does
// not is remade on both sides (a new listening port, published under the next attempt's key),
// the side that accepted the stranger naming its address on stderr, until the group's
// timeout. Only then does the job secret's proof run (Note [Gloo pair proofs]): the check
// finds which connection is not the peer's, so that it can be made again, while the proof is
// what a stranger cannot pass. (A connection through a NAT, whose ends differ on the two
// sides, never passes the check; Gloo's published addresses do not work through one either.)
//
// Note [Gloo connect timeout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Gloo's Pair::connect waits for the TCP connection 5 x the timeout it was given ("a longer
// timeout when waiting for initial connect", gloo/transport/tcp/pair.h), so a peer that
// published its address and then never connected failed a 5 s group after 25 s. connect_mesh
// therefore gives the pairs it makes a fifth of the time left, so that the connect wait ends
// by the group's deadline, and waits for the peers' addresses and records until that deadline.
// After connecting, the context gets the full timeout; the pairs keep their fifth only for
// their socket options and sync-mode reads, which the group never uses (every op passes its
// own timeout, through the options API).
#include "comm/backend/gloo/pair_mesh.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include <netinet/in.h>

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>

#include "base/error.hpp"
#include "comm/host_identity.hpp"
#include "comm/store/job_crypto.hpp"
#include "comm/store/store.hpp"

namespace actorch::dist {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

// A gloo::Context over pairs connected here: what connectFullMesh leaves behind, a device and
// a transport context holding one pair per peer.
class mesh_context final : public gloo::Context {
public:
  mesh_context(int my_rank, int ranks, std::shared_ptr<gloo::transport::Device> device,
               std::shared_ptr<gloo::transport::Context> pairs)
      : gloo::Context(my_rank, ranks) {
    device_ = std::move(device);
    transportContext_ = std::move(pairs);
  }
};

bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family)
    return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// What one side of a pair holds once its connect returned: the two ends of its connection, or
// why it has none. Written to the store as "ok <local> <peer>" or "failed <why>".
struct pair_ends {
  bool ok = false;
  std::string local, peer, why;

  std::string text() const { return ok ? "ok " + local + " " + peer : "failed " + why; }
  static pair_ends parse(const std::string& s) {
    pair_ends e;
    if (s.rfind("ok ", 0) == 0) {
      const size_t space = s.find(' ', 3);
      if (space != std::string::npos) {
        e.ok = true;
        e.local = s.substr(3, space - 3);
        e.peer = s.substr(space + 1);
        return e;
      }
    }
    e.why = s.rfind("failed ", 0) == 0 ? s.substr(7) : "an unreadable record: " + s.substr(0, 80);
    return e;
  }
  // Whether `mine` and `theirs` are the two ends of one connection.
  static bool joined(const pair_ends& mine, const pair_ends& theirs) {
    return mine.ok && theirs.ok && mine.peer == theirs.local && mine.local == theirs.peer;
  }
};

// The local address of a Gloo TCP pair: its listening port's until it connects, then its
// connection's own end.
const sockaddr_storage& local_address(const gloo::transport::Pair& pair) {
  return static_cast<const gloo::transport::tcp::Address&>(pair.address()).getSockaddr();
}

// Connects each of `peers`' pairs to its published address (addresses[q]) and says what each
// holds; the connections' sockets are found in one look at this process's descriptors.
std::vector<pair_ends> connect_pairs(gloo::transport::Context& pairs, const std::vector<int>& peers,
                                     const std::vector<std::string>& addresses) {
  std::vector<pair_ends> ends(addresses.size());
  std::vector<int> connected;
  std::vector<sockaddr_storage> locals;
  for (const int q : peers) {
    auto& pair = *pairs.getPair(q);
    try {
      pair.connect(std::vector<char>(addresses[size_t(q)].begin(), addresses[size_t(q)].end()));
      connected.push_back(q);
      locals.push_back(local_address(pair));
    } catch (const std::exception& e) {
      ends[size_t(q)].why = e.what();
      std::replace(ends[size_t(q)].why.begin(), ends[size_t(q)].why.end(), '\n', ' ');
    }
  }
  const std::vector<int> fds = sockets_bound_to(locals);
  for (size_t i = 0; i < connected.size(); ++i) {
    pair_ends& e = ends[size_t(connected[i])];
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (fds[i] < 0 || ::getpeername(fds[i], reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
      e.why = "its connection closed as it was made";
      continue;
    }
    e.ok = true;
    e.local = endpoint_text(locals[i]);
    e.peer = endpoint_text(peer);
  }
  return ends;
}

// Why rank `me`'s pair with rank `peer` is not theirs, from its side: for its log line and for
// the error at the timeout.
std::string mismatch(const pair_ends& mine, const pair_ends& theirs, int me, int peer) {
  const std::string who = "rank " + std::to_string(peer);
  std::string s = "rank " + std::to_string(me) + "'s ";
  if (mine.ok && (!theirs.ok || mine.peer != theirs.local))
    s += "connection came from " + mine.peer + ", which is not " + who;
  else if (!mine.ok)
    s += "connection failed (" + mine.why + ")";
  else
    s += "connection (" + mine.local + " to " + mine.peer + ") is not " + who + "'s";
  s += "; " + who +
       (theirs.ok ? " holds " + theirs.local + " to " + theirs.peer
                  : " could not connect (" + theirs.why + ")");
  return s;
}

// What is left until `deadline`, at least 1 ms (a wait of 0 would be no wait at all).
milliseconds left_until(steady::time_point deadline) {
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(deadline - steady::now()));
}

// Waits for `key` until `deadline`, then reads it; `missing` says what did not come.
std::string wait_get(store& st, const std::string& key, steady::time_point deadline,
                     const std::string& missing) {
  try {
    st.wait({key}, left_until(deadline));
  } catch (const std::exception& e) {
    ACTORCH_FAIL(missing, " (", e.what(), ")");
  }
  return st.get(key);
}

// Where rank `from` publishes its pair's address for rank `to` at `attempt`, and the ends it
// then holds.
std::string address_key(int from, int to, int attempt) {
  return "pair/" + std::to_string(from) + "-" + std::to_string(to) + "/" + std::to_string(attempt);
}
std::string ends_key(int from, int to, int attempt) {
  return address_key(from, to, attempt) + "/ends";
}

// Note [Gloo pair proofs]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The pair checks (Note [Gloo pair checks]) find a stranger who took a peer's place; a
// stranger who knows the check could still pretend. With a job secret, every pair therefore
// proves it after connecting and before carrying data: each rank sends each peer 32 random
// bytes, and answers the peer's with HMAC-SHA256(secret, their bytes, its own global rank, the
// peer's); a peer that sends no bytes or a wrong answer within the timeout fails the
// rendezvous, naming that peer. Strangers who know no secret cannot answer, and a recorded
// answer is useless for other bytes. The two messages use slots outside Gloo's and the
// point-to-point ones (top byte 0xA7).
void prove_pairs(gloo::Context& ctx, const std::string& secret, const std::vector<int>& global,
                 int rank, milliseconds timeout) {
  using gloo::transport::UnboundBuffer;
  constexpr uint64_t kNonceSlot = uint64_t(0xA7) << 56, kProofSlot = kNonceSlot | 1;
  const size_t n = global.size();
  std::vector<int> peers;
  for (int q = 0; q < int(n); ++q)
    if (q != rank)
      peers.push_back(q);
  std::string mine = random_bytes(32, "process_group_gloo's pair proofs");
  const auto proof = [&](const std::string& nonce, int prover, int verifier) {
    return hmac_sha256(secret, "actorch gloo pair " + nonce + " " + std::to_string(prover) + " " +
                                   std::to_string(verifier));
  };
  std::vector<std::string> theirs(n, std::string(32, '\0')), answers(n),
      got(n, std::string(32, '\0'));
  std::vector<std::unique_ptr<UnboundBuffer>> sends, recvs(n);
  const auto deadline = steady::now() + timeout;
  const auto left = [&] { return left_until(deadline); };
  // Waits for peer q's message in recvs[q], naming q and `what` when it does not come.
  const auto receive = [&](int q, const char* what) {
    try {
      if (recvs[size_t(q)]->waitRecv(left()))
        return;
    } catch (const std::exception& e) {
      ACTORCH_FAIL("rank ", global[size_t(q)], " sent no ", what, " over its Gloo connection (",
                   e.what(), "): a process that is not rank ", global[size_t(q)],
                   " may have connected in its place");
    }
    ACTORCH_FAIL("rank ", global[size_t(q)], "'s ", what, " was aborted");
  };
  // Sends 32 bytes to peer q and posts the receive of its 32 into `in`, both on `slot`.
  const auto exchange = [&](int q, std::string& out, std::string& in, uint64_t slot) {
    sends.push_back(ctx.createUnboundBuffer(out.data(), 32));
    sends.back()->send(q, slot);
    recvs[size_t(q)] = ctx.createUnboundBuffer(in.data(), 32);
    recvs[size_t(q)]->recv(q, slot);
  };
  for (const int q : peers)
    exchange(q, mine, theirs[size_t(q)], kNonceSlot);
  for (const int q : peers) {
    receive(q, "challenge");
    answers[size_t(q)] = proof(theirs[size_t(q)], global[size_t(rank)], global[size_t(q)]);
    exchange(q, answers[size_t(q)], got[size_t(q)], kProofSlot);
  }
  int wrong = -1;
  for (const int q : peers) {
    receive(q, "proof of the job secret");
    const std::string want = proof(mine, global[size_t(q)], global[size_t(rank)]);
    if (wrong < 0 && !proofs_equal(want, got[size_t(q)]))
      wrong = q;
  }
  // This rank's own proofs go out first, so that its peers judge them before it hangs up.
  for (auto& b : sends)
    b->waitSend(left());
  ACTORCH_CHECK(wrong < 0, "rank ", global[size_t(wrong)], " answered with a wrong proof of the ",
                "job secret over its Gloo connection: a process of another job, or one given ",
                "another secret (ACTORCH_JOB_TOKEN), is connected in its place");
}

} // namespace

void scrub_address(std::string& record) {
  if (record.size() != sizeof(sockaddr_storage) + sizeof(ssize_t))
    return;
  sa_family_t family = 0;
  std::memcpy(&family, record.data() + offsetof(sockaddr_storage, ss_family), sizeof family);
  const size_t used = family == AF_INET    ? sizeof(sockaddr_in)
                      : family == AF_INET6 ? sizeof(sockaddr_in6)
                                           : sizeof(sockaddr_storage);
  std::memset(record.data() + used, 0, sizeof(sockaddr_storage) - used);
}

std::vector<int> sockets_bound_to(const std::vector<sockaddr_storage>& locals) {
  std::vector<int> fds(locals.size(), -1);
  if (locals.empty())
    return fds;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      continue; // not a socket (or gone meanwhile)
    for (size_t i = 0; i < locals.size(); ++i)
      if (fds[i] < 0 && same_endpoint(a, locals[i]))
        fds[i] = fd;
  }
  return fds;
}

std::shared_ptr<gloo::Context> connect_mesh(store& st,
                                            const std::shared_ptr<gloo::transport::Device>& device,
                                            int rank, const std::vector<int>& global,
                                            const std::string& secret, milliseconds timeout) {
  const int size = int(global.size());
  const auto deadline = steady::now() + timeout;
  const auto left = [&] { return left_until(deadline); };
  const auto name = [&](int r) { return "rank " + std::to_string(global[size_t(r)]); };
  auto pairs = device->createContext(rank, size);
  std::vector<int> pending;
  for (int q = 0; q < size; ++q)
    if (q != rank)
      pending.push_back(q);
  std::vector<std::string> trouble(size_t(size), ""); // each pair's last mismatch
  // What a message about peer q's pair adds once it was remade.
  const auto before = [&](int q) {
    return trouble[size_t(q)].empty() ? std::string() : " (before: " + trouble[size_t(q)] + ")";
  };
  for (int attempt = 0; !pending.empty(); ++attempt) {
    if (attempt > 0) {
      if (steady::now() >= deadline)
        ACTORCH_FAIL(name(rank), " could not connect a Gloo pair with ", name(pending.front()),
                     " in ", attempt,
                     " attempts within the timeout: ", trouble[size_t(pending.front())]);
      // A stranger who keeps taking the new ports costs a pause, not a busy loop.
      std::this_thread::sleep_for(
          std::min({milliseconds(10 * attempt), milliseconds(200), left()}));
    }
    // Note [Gloo connect timeout]: Gloo waits 5 x a pair's timeout for it to connect.
    pairs->setTimeout(std::max(milliseconds(1), left() / 5));
    for (const int q : pending) {
      auto& pair = pairs->createPair(q);
      const std::vector<char> bytes = pair->address().bytes();
      std::string record(bytes.begin(), bytes.end());
      scrub_address(record);
      st.set(address_key(rank, q, attempt), record);
    }
    // Every peer's address before any connect: the listening side of a pair waits inside
    // Gloo's connect, where a store that fails the wait (an elastic membership superseded:
    // Note [Superseded membership] in comm/elastic.cpp) cannot reach it, so it waits only for
    // peers known to have come.
    std::vector<std::string> addresses(static_cast<size_t>(size));
    for (const int q : pending)
      addresses[size_t(q)] = wait_get(st, address_key(q, rank, attempt), deadline,
                                      name(q) + " published no address for its Gloo pair with " +
                                          name(rank) + before(q));
    const std::vector<pair_ends> mine = connect_pairs(*pairs, pending, addresses);
    for (const int q : pending)
      st.set(ends_key(rank, q, attempt), mine[size_t(q)].text());
    std::vector<int> again;
    for (const int q : pending) {
      const pair_ends& ours = mine[size_t(q)];
      const auto theirs = pair_ends::parse(wait_get(
          st, ends_key(q, rank, attempt), deadline,
          name(q) + " never said what its Gloo pair with " + name(rank) + " reached" +
              (ours.ok ? "" : "; " + name(rank) + "'s own connect failed (" + ours.why + ")") +
              before(q)));
      if (pair_ends::joined(mine[size_t(q)], theirs))
        continue;
      trouble[size_t(q)] =
          mismatch(mine[size_t(q)], theirs, global[size_t(rank)], global[size_t(q)]);
      if (attempt < 3)
        std::fprintf(stderr, "actorch: remaking the Gloo pair of %s and %s: %s\n",
                     name(rank).c_str(), name(q).c_str(), trouble[size_t(q)].c_str());
      again.push_back(q);
    }
    pending = std::move(again);
  }
  pairs->setTimeout(timeout);
  auto ctx = std::make_shared<mesh_context>(rank, size, device, std::move(pairs));
  ctx->setTimeout(timeout);
  if (!secret.empty() && size > 1)
    prove_pairs(*ctx, secret, global, rank, timeout);
  return ctx;
}

} // namespace actorch::dist
