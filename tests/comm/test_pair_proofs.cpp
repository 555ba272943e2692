// Note [Gloo pair proofs]
// ~~~~~~~~~~~~~~~~~~~~~~~
// With a job secret, each Gloo pair proves it before it carries data,
// so a process connected in a peer's place (which knows no secret) fails the rendezvous, naming
// the peer, instead of taking part in the job's collectives.
#include <catch2/catch.hpp>

#include <thread>

#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

// Two ranks as threads, rank r proving secrets[r]: what each all_reduce gave or threw.
std::vector<std::string> two_ranks(const std::vector<std::string>& secrets) {
  auto st = std::make_shared<hash_store>(std::chrono::milliseconds(3000));
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
