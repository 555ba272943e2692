// Note [Gloo pair checks], Note [Gloo pair proofs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A local process that connects to a rank's Gloo pair port before the peer takes the peer's
// place: the pair is remade until the timeout, the stranger named on stderr. With a job
// secret, each pair then proves it before it carries data, so a process connected in a peer's
// place (which knows no secret) fails the rendezvous, naming the peer.
#include <catch2/catch.hpp>

#include <cstring>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/ops/factory.hpp"
#include "tests/comm/forwarding_store.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/files.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

// A store through which a local stranger watches the rendezvous: each time a rank publishes
// a Gloo address record (a sockaddr_storage and a sequence number), the stranger connects to
// it and writes 8 bytes before anyone can read it, so it reaches the port before the peer. It
// does so `attacks` times, then only watches; it keeps its connections open.
class stranger_store final : public forwarding_store {
public:
  explicit stranger_store(int attacks)
      : forwarding_store(std::chrono::milliseconds(3000)), attacks_(attacks) {}
  ~stranger_store() override {
    for (const int fd : sockets_)
      ::close(fd);
  }
  void set(const std::string& key, const std::string& value) override {
    if (value.size() == sizeof(sockaddr_storage) + sizeof(ssize_t))
      attack(value);
    forwarding_store::set(key, value);
  }
  /// The stranger's own addresses ("127.0.0.1:port"), as the ranks see its connections.
  std::vector<std::string> ends() {
    std::lock_guard lock(mu_);
    return ends_;
  }

private:
  void attack(const std::string& record) {
    std::lock_guard lock(mu_);
    sockaddr_storage ss{};
    std::memcpy(&ss, record.data(), sizeof ss);
    if (ss.ss_family != AF_INET || attacks_ == 0)
      return;
    --attacks_;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockets_.push_back(fd);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), sizeof(sockaddr_in)) != 0)
      return;
    const char bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    (void)!::write(fd, bytes, sizeof bytes);
    sockaddr_in self{};
    socklen_t len = sizeof self;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
    char host[INET_ADDRSTRLEN] = "";
    ::inet_ntop(AF_INET, &self.sin_addr, host, sizeof host);
    ends_.push_back(std::string(host) + ":" + std::to_string(ntohs(self.sin_port)));
  }

  std::mutex mu_;
  int attacks_;
  std::vector<int> sockets_;
  std::vector<std::string> ends_;
};

// Two ranks as threads, rank r proving secrets[r], through `st` (a new hash_store when null):
// what each all_reduce gave or threw.
std::vector<std::string> two_ranks(const std::vector<std::string>& secrets,
                                   std::shared_ptr<store> st = nullptr) {
  if (st == nullptr)
    st = std::make_shared<hash_store>(std::chrono::milliseconds(3000));
  std::vector<std::string> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::string result;
      const std::string error = error_of([&] {
        auto opts = short_timeout(1500);
        opts.secret = secrets[size_t(r)];
        process_group_gloo pg(std::make_shared<prefix_store>("pg", st), r, 2, opts);
        tensor t = full({4}, double(r + 1));
        pg.all_reduce(t, reduce_op::sum).wait();
        result = values_of(t) == std::vector<double>(4, 3.0) ? "summed" : "wrong sum";
      });
      out[size_t(r)] = error.empty() ? result : error;
    });
  for (auto& t : threads)
    t.join();
  return out;
}

} // namespace

TEST_CASE("with a job secret, every Gloo pair proves it before carrying data",
          "[comm][gloo][secret]") {
  SECTION("ranks that share the secret") {
    const auto got = two_ranks({"job-secret", "job-secret"});
    CHECK(got[0] == "summed");
    CHECK(got[1] == "summed");
  }
  SECTION("a peer that cannot prove it is named by the other") {
    const auto t0 = std::chrono::steady_clock::now();
    const auto got = two_ranks({"job-secret", "another-secret"});
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    // Each names the other: its proof was wrong or, when the other hung up first, never came.
    for (int r = 0; r < 2; ++r) {
      const std::string peer = "rank " + std::to_string(1 - r);
      CHECK_THAT(got[size_t(r)],
                 Contains(peer + " answered with a wrong proof of the job secret over its Gloo "
                                 "connection") ||
                     Contains(peer + " sent no proof of the job secret over its Gloo connection"));
    }
  }
}

TEST_CASE("a stranger at a Gloo pair's port is named and the pair remade, with a secret or not",
          "[comm][gloo][secret]") {
  const std::string secret = GENERATE(std::string(), std::string("job-secret"));
  CAPTURE(secret);
  const auto dir = scratch_dir("gloo_stranger");
  // Both ranks' first addresses: one of the two sides listens, and meets the stranger first.
  auto st = std::make_shared<stranger_store>(2);
  std::vector<std::string> got;
  std::string log;
  {
    stderr_capture err((dir / "stderr.log").string());
    got = two_ranks({secret, secret}, st);
    log = err.text();
  }
  CHECK(got[0] == "summed");
  CHECK(got[1] == "summed");
  CHECK_THAT(log, Contains("remaking the Gloo pair of rank"));
  bool named = false;
  for (const auto& end : st->ends())
    named = named || log.find("came from " + end + ", which is not rank") != std::string::npos;
  CHECK(named);
  CAPTURE(log);
}

TEST_CASE("a stranger at every new Gloo pair port fails the group at its timeout, named",
          "[comm][gloo][secret]") {
  const auto dir = scratch_dir("gloo_strangers");
  auto st = std::make_shared<stranger_store>(1000);
  std::vector<std::string> got;
  const auto t0 = std::chrono::steady_clock::now();
  {
    stderr_capture err((dir / "stderr.log").string());
    got = two_ranks({"job-secret", "job-secret"}, st);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < std::chrono::milliseconds(1500 + 2000));
  for (int r = 0; r < 2; ++r) {
    CAPTURE(got[size_t(r)]);
    CHECK_THAT(got[size_t(r)], Contains("could not connect a Gloo pair with rank") ||
                                   Contains("its Gloo pair with rank"));
    CHECK_THAT(got[size_t(r)], Contains("127.0.0.1:"));
  }
}
