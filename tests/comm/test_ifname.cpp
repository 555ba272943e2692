// GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME: parsing and the errors naming the unknown interface
// and those that exist; and a Gloo group spread over two interfaces, checked from the kernel's
// side. That test re-runs this binary inside a network namespace of its own (`unshare -rn`,
// unprivileged) holding lo and a veth pair, and asserts, with ss(8)'s per-socket byte counts,
// that the group's connections sit on both interfaces' addresses and that consecutive
// all_reduces alternate between them (Note [Socket interfaces]).
#include <catch2/catch.hpp>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.hpp"
#include "comm/backend/socket_ifname.hpp"
#include "comm/distributed.hpp"
#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/files.hpp"

using namespace actorch;
using namespace actorch::dist;
using actorch::test::env_var;
using actorch::test::error_of;
using actorch::test::on_ranks;
using Catch::Contains;

namespace {

std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  // Also called from rank threads, where Catch2's assertions must not run.
  ACTORCH_CHECK(p != nullptr, "popen(", cmd, ") failed");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  const int rc = ::pclose(p);
  status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// Bytes received on established TCP sockets, by local IPv4 address (ss -tin).
std::map<std::string, int64_t> received_by_address() {
  int status = 0;
  std::istringstream in(run_capture("ss -tinH state established 2>&1", status));
  std::map<std::string, int64_t> bytes;
  std::string line, local;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    if (line[0] != ' ' && line[0] != '\t') { // "0 0 10.77.0.1:60917 10.77.0.1:39174"
      std::istringstream f(line);
      std::string recvq, sendq;
      f >> recvq >> sendq >> local;
      local = local.substr(0, local.rfind(':'));
      bytes[local] += 0;
      continue;
    }
    const auto at = line.find("bytes_received:");
    if (at != std::string::npos)
      bytes[local] += std::stoll(line.substr(at + 15));
  }
  return bytes;
}

constexpr const char* kVethAddress = "10.77.0.1";

} // namespace

TEST_CASE("GLOO_SOCKET_IFNAME names existing interfaces, one or several", "[comm][ifname]") {
  const auto names = network_interfaces();
  REQUIRE(std::find(names.begin(), names.end(), "lo") != names.end());
  CHECK(parse_gloo_ifnames("lo") == std::vector<std::string>{"lo"});
  CHECK(parse_gloo_ifnames("lo, lo") == std::vector<std::string>{"lo", "lo"});
  const std::string e = error_of([] { parse_gloo_ifnames("lo,nosuch0"); });
  CHECK_THAT(e, Contains("GLOO_SOCKET_IFNAME='lo,nosuch0': no network interface named "
                         "'nosuch0' on this host; the interfaces are: ") &&
                    Contains("lo"));
  CHECK_THAT(error_of([] { parse_gloo_ifnames("lo,,lo"); }), Contains("empty interface name"));
  CHECK_THAT(error_of([] { parse_gloo_ifnames("lo,"); }), Contains("empty interface name"));
  {
    env_var env("GLOO_SOCKET_IFNAME", "lo");
    CHECK(gloo_socket_ifnames() == std::vector<std::string>{"lo"});
  }
  {
    env_var env("GLOO_SOCKET_IFNAME", "");
    CHECK(gloo_socket_ifnames().empty());
  }
  CHECK(interface_family("lo") == AF_INET);
}

TEST_CASE("a Gloo group refuses an unknown interface before connecting", "[comm][ifname]") {
  env_var env("GLOO_SOCKET_IFNAME", "nosuch0");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e =
      error_of([] { on_ranks<int>(2, [](int, process_group_gloo&) { return 0; }); });
  CHECK_THAT(e, Contains("no network interface named 'nosuch0'") &&
                    Contains("the interfaces are: ") && Contains("lo"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  SECTION("options::interfaces is checked the same way") {
    env_var unset("GLOO_SOCKET_IFNAME", "");
    auto o = actorch::test::short_timeout();
    o.interfaces = {"lo", "nosuch1"};
    CHECK_THAT(error_of([&] {
                 on_ranks<int>(
                     2, [](int, process_group_gloo&) { return 0; }, o);
               }),
               Contains("options::interfaces entry='nosuch1': no network interface named "
                        "'nosuch1'"));
  }
}

TEST_CASE("a Gloo group over GLOO_SOCKET_IFNAME=lo,lo runs collectives and p2p", "[comm][ifname]") {
  // Two devices on one interface: the contexts alternate, which the results do not show, but
  // both meshes must connect and every op must land on a context both ranks agree on.
  env_var env("GLOO_SOCKET_IFNAME", "lo,lo");
  auto o = actorch::test::short_timeout();
  o.shared_memory = false;
  const auto sums = on_ranks<std::vector<double>>(
      2,
      [](int rank, process_group_gloo& pg) {
        std::vector<double> out;
        for (int i = 0; i < 5; ++i) {
          tensor t = full({3}, double(rank + i));
          pg.all_reduce(t, reduce_op::sum).wait();
          out.push_back(t[0].item<double>());
        }
        for (int tag = 0; tag < 2; ++tag) {
          tensor t = full({2}, double(10 * rank + tag));
          if (rank == 0)
            pg.send(t, 1, tag).wait();
          else
            pg.recv(t, 0, tag).wait();
          out.push_back(t[1].item<double>());
        }
        return out;
      },
      o);
  CHECK(sums[0] == std::vector<double>{1, 3, 5, 7, 9, 0, 1});
  CHECK(sums[1] == std::vector<double>{1, 3, 5, 7, 9, 0, 1});
}

TEST_CASE("NCCL_SOCKET_IFNAME is checked with NCCL's prefix, exact and exclude rules",
          "[comm][ifname]") {
  CHECK_NOTHROW(check_nccl_ifname("lo"));
  CHECK_NOTHROW(check_nccl_ifname("l"));   // a prefix of lo
  CHECK_NOTHROW(check_nccl_ifname("=lo")); // exact
  CHECK_THAT(error_of([] { check_nccl_ifname("=l"); }),
             Contains("NCCL_SOCKET_IFNAME='=l': no network interface named 'l' on this host; "
                      "the interfaces are: "));
  CHECK_THAT(error_of([] { check_nccl_ifname("lo,nosuch"); }),
             Contains("no network interface whose name starts with 'nosuch'"));
  CHECK_NOTHROW(check_nccl_ifname("^nosuch")); // excluding nothing leaves them all
  std::string all;
  for (const auto& n : network_interfaces())
    all += (all.empty() ? "" : ",") + n;
  CHECK_THAT(error_of([&] { check_nccl_ifname("^" + all); }),
             Contains("excludes every network interface on this host"));

  SECTION("init_process_group with nccl checks it before NCCL starts") {
    env_var env("NCCL_SOCKET_IFNAME", "nosuch0");
    auto st = std::make_shared<hash_store>();
    const std::string e = error_of(
        [&] { init_process_group({.backend = "nccl", .world_size = 1, .rank = 0, .store = st}); });
    if (is_nccl_available())
      CHECK_THAT(e, Contains("NCCL_SOCKET_IFNAME='nosuch0': no network interface whose name "
                             "starts with 'nosuch0'"));
    else
      CHECK_THAT(e, Contains("nccl backend is not available"));
    CHECK_FALSE(is_initialized());
  }
}

// Runs inside the namespace set up by the next test (hidden: "[.]").
TEST_CASE("netns half of the two-interface test", "[.][ifname-netns]") {
  REQUIRE(std::getenv("ACTORCH_IFNAME_NETNS") != nullptr);
  env_var env("GLOO_SOCKET_IFNAME", std::string("lo,actorch0"));
  auto o = actorch::test::short_timeout(10000);
  o.shared_memory = false;            // the TCP path: that is what the interfaces carry
  constexpr int64_t kElems = 1 << 20; // 4 MiB of float32 per all_reduce
  std::barrier sync(2);
  using deltas = std::vector<std::map<std::string, int64_t>>;
  const auto results = on_ranks<deltas>(
      2,
      [&](int rank, process_group_gloo& pg) {
        deltas d;
        auto before = received_by_address();
        for (int op = 0; op < 3; ++op) {
          tensor t = full({kElems}, 1.0);
          pg.all_reduce(t, reduce_op::sum).wait();
          ACTORCH_CHECK(t[kElems - 1].item<float>() == 2.0f, "all_reduce gave a wrong sum");
          sync.arrive_and_wait(); // both ranks done with op: its bytes have arrived
          if (rank == 0) {
            const auto after = received_by_address();
            std::map<std::string, int64_t> delta;
            for (const auto& [addr, b] : after)
              delta[addr] = b - before[addr];
            d.push_back(delta);
            before = after;
          }
          sync.arrive_and_wait();
        }
        return d;
      },
      o);
  const deltas& d = results[0];
  REQUIRE(d.size() == 3);
  // Op n runs on context n % 2: lo (127.0.0.1), then the veth's address, then lo again.
  for (int op = 0; op < 3; ++op) {
    INFO("op " << op << ": " << d[size_t(op)].size() << " addresses");
    const auto& m = d[size_t(op)];
    const int64_t on_lo = m.count("127.0.0.1") ? m.at("127.0.0.1") : 0;
    const int64_t on_veth = m.count(kVethAddress) ? m.at(kVethAddress) : 0;
    CAPTURE(on_lo, on_veth);
    if (op % 2 == 0) {
      CHECK(on_lo >= 4 * kElems);
      CHECK(on_veth < 64 * 1024);
    } else {
      CHECK(on_veth >= 4 * kElems);
      CHECK(on_lo < 64 * 1024);
    }
  }
}

TEST_CASE("GLOO_SOCKET_IFNAME=lo,VETH puts a group on both interfaces, round-robin",
          "[comm][ifname]") {
  int status = 0;
  // A missing tool is a missing package (scripts/setup.sh test), not a reason to skip.
  const std::string tools = run_capture(
      "for t in ip ss unshare; do command -v $t || { echo $t: not found; exit 1; }; done", status);
  INFO("ip, ss (iproute2) and unshare (util-linux): " << tools);
  REQUIRE(status == 0);
  const std::string probe = run_capture(
      "unshare -rn sh -c 'ip link add actorch0 type veth peer name actorch1' 2>&1", status);
  if (status != 0) {
    WARN("skipped: no unprivileged network namespace with a veth pair here (" << probe << ")");
    return;
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';
  const std::string script =
      std::string("ip link set lo up && ip link add actorch0 type veth peer name actorch1 && ") +
      "ip addr add " + kVethAddress + "/24 dev actorch0 && ip link set actorch0 up && " +
      "ip link set actorch1 up && ACTORCH_IFNAME_NETNS=1 exec \"$0\" '[ifname-netns]'";
  const std::string out =
      run_capture("unshare -rn sh -c '" + script + "' '" + self + "' 2>&1", status);
  INFO(out);
  CHECK(status == 0);
  CHECK_THAT(out, Contains("All tests passed"));
}
