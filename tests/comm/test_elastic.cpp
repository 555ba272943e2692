// Tests of comm/elastic: the membership lists the launcher writes and the ranks read, and what a
// process outside an elastic launcher is told (Note [Elastic membership] in
// comm/launch/launcher.cpp; the healing itself is tests/tools/digits_elastic.py's).
#include <catch2/catch.hpp>

#include <chrono>
#include <regex>
#include <thread>

#include "comm/distributed.hpp"
#include "comm/elastic.hpp"
#include "comm/launch/launcher.hpp"
#include "comm/store/tcp_store.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/files.hpp"

using namespace actorch::dist;
using actorch::test::env_var;
using Catch::Contains;

TEST_CASE("membership lists go to the store and back, and a malformed one is named",
          "[comm][elastic]") {
  CHECK(elastic::rank_list({0, 2, 3}) == "0,2,3");
  CHECK(elastic::rank_list({}).empty());
  CHECK(elastic::parse_rank_list("0,2,3", "m") == std::vector<int>{0, 2, 3});
  CHECK(elastic::parse_rank_list("", "m").empty());
  CHECK(elastic::parse_rank_list(elastic::rank_list({7}), "m") == std::vector<int>{7});
  CHECK_THROWS_WITH(elastic::parse_rank_list("0,x,2", "membership 4"),
                    Contains("membership 4 (\"0,x,2\")"));
  CHECK_THROWS_WITH(elastic::parse_rank_list("0,-1", "membership 4"), Contains("negative"));
}

TEST_CASE("outside an elastic launcher, regrouping says what is missing", "[comm][elastic]") {
  const actorch::test::env_var elastic("ACTORCH_ELASTIC", std::nullopt);
  const actorch::test::env_var join("ACTORCH_ELASTIC_JOIN", std::nullopt);
  CHECK_FALSE(elastic::enabled());
  CHECK(elastic::replacement() == 0);
  const actorch::test::env_var rank("RANK", std::nullopt);
  CHECK_THROWS_WITH(elastic::coordinator(std::chrono::milliseconds(100)),
                    Contains("elastic: RANK is not set") && Contains("actorch launch --elastic"));
  const actorch::test::env_var bad_join("ACTORCH_ELASTIC_JOIN", std::string("two"));
  CHECK_THROWS_WITH(elastic::replacement(), Contains("ACTORCH_ELASTIC_JOIN"));
}

namespace {

// What `actorch launch --elastic` gives its ranks: a store on 127.0.0.1 (MASTER_ADDR and
// MASTER_PORT say where) holding the memberships it publishes.
struct launcher_store {
  const int port = free_port();
  std::shared_ptr<tcp_store> host = std::make_shared<tcp_store>("127.0.0.1", uint16_t(port), true,
                                                                std::chrono::milliseconds(30000));
  const env_var addr{"MASTER_ADDR", std::string("127.0.0.1")};
  const env_var master_port{"MASTER_PORT", std::to_string(port)};

  void publish(int64_t generation, const std::string& ranks) {
    host->set(elastic::members_key + std::to_string(generation), ranks);
    host->set(elastic::generation_key, std::to_string(generation));
  }
  // A rank's coordinator: RANK is read here, on the test's thread.
  std::unique_ptr<elastic::coordinator>
  coordinator(int launch_rank, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const env_var rank("RANK", std::to_string(launch_rank));
    return std::make_unique<elastic::coordinator>(timeout);
  }
};

} // namespace

TEST_CASE("a membership whose member is lost before it joins gives way to the next one at once, "
          "not at the group's timeout",
          "[comm][elastic]") {
  using namespace std::chrono;
  launcher_store launcher;
  // Launch ranks 0, 1 and 2; membership 1 still has rank 2, which never joins.
  launcher.publish(1, "0,1,2");
  std::vector<std::unique_ptr<elastic::coordinator>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(launcher.coordinator(r));
  struct outcome {
    std::string first_error;
    double first_s = 0;
    int64_t regrouped_in = 0;
    float sum = 0;
  };
  std::vector<outcome> got(2);
  std::vector<std::thread> threads;
  const auto start = steady_clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      elastic::coordinator& c = *ranks[size_t(r)];
      outcome& o = got[size_t(r)];
      try {
        c.make_group(elastic::membership{1, {0, 1, 2}, r});
      } catch (const std::exception& e) {
        o.first_error = e.what();
      }
      o.first_s = duration<double>(steady_clock::now() - start).count();
      try {
        const elastic::membership m = c.next(1, milliseconds(5000));
        o.regrouped_in = m.generation;
        auto pg = c.make_group(m);
        actorch::tensor t = actorch::full({4}, float(r + 1));
        pg->all_reduce(t, reduce_op::sum).wait();
        o.sum = t.data_ptr<float>()[0];
      } catch (const std::exception& e) {
        o.first_error += std::string(" | then: ") + e.what();
      }
    });
  std::this_thread::sleep_for(milliseconds(1000)); // the launcher detects the loss
  launcher.publish(2, "0,1");
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << got[size_t(r)].first_error);
    CHECK_THAT(got[size_t(r)].first_error,
               Contains("elastic: membership 2 was published while membership 1's group met"));
    CHECK(got[size_t(r)].first_s < 10.0); // the group's timeout is 20 s
    CHECK(got[size_t(r)].regrouped_in == 2);
    CHECK(got[size_t(r)].sum == 3.0f);
  }
}

TEST_CASE("a membership's group that never meets fails at the group's timeout, naming it",
          "[comm][elastic]") {
  using namespace std::chrono;
  launcher_store launcher;
  launcher.publish(5, "0,1"); // rank 1 never comes, and no membership follows
  auto rank0 = launcher.coordinator(0, milliseconds(1000));
  const auto start = steady_clock::now();
  std::string error;
  try {
    rank0->make_group(elastic::membership{5, {0, 1}, 0});
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double took = duration<double>(steady_clock::now() - start).count();
  INFO(error);
  // The wait goes in slices of 200 ms (Note [Superseded membership]); its error is the whole
  // wait's (what was left of the group's 1000 ms when the wait began), not the last slice's.
  CHECK(std::regex_search(error, std::regex("elastic: membership 5's group: timed out after "
                                            "(9[0-9][0-9]|1000) ms waiting for keys")));
  CHECK(took >= 0.9);
  CHECK(took < 10.0);
}

TEST_CASE("a replacement whose membership is superseded before it meets joins the next one",
          "[comm][elastic]") {
  using namespace std::chrono;
  launcher_store launcher;
  const env_var elastic_on("ACTORCH_ELASTIC", std::string("1"));
  // Launch rank 2 was lost and replaced: membership 1 has ranks 0, 1 and the replacement; rank 1
  // is lost too before membership 1 meets, and membership 2 has ranks 0 and 2.
  launcher.publish(1, "0,1,2");
  const std::unique_ptr<elastic::coordinator> survivor = launcher.coordinator(0);
  const env_var rank("RANK", std::string("2")); // the replacement's, read by its thread
  const env_var join("ACTORCH_ELASTIC_JOIN", std::string("1"));
  float survivor_sum = 0, replacement_sum = 0;
  int replacement_rank = -1;
  std::string survivor_error, replacement_error;
  const auto start = steady_clock::now();
  std::thread survivor_thread([&] {
    try {
      try {
        survivor->make_group(elastic::membership{1, {0, 1, 2}, 0});
      } catch (const std::exception&) { // membership 2 is out
      }
      auto pg = survivor->make_group(survivor->next(1, milliseconds(5000)));
      actorch::tensor t = actorch::full({4}, 1.0f);
      pg->all_reduce(t, reduce_op::sum).wait();
      survivor_sum = t.data_ptr<float>()[0];
    } catch (const std::exception& e) {
      survivor_error = e.what();
    }
  });
  std::thread replacement_thread([&] {
    try {
      init_process_group(
          {.world_size = 3, .rank = 2, .timeout = milliseconds(20000), .store = launcher.host});
      replacement_rank = get_rank();
      actorch::tensor t = actorch::full({4}, 2.0f);
      world()->all_reduce(t, reduce_op::sum).wait();
      replacement_sum = t.data_ptr<float>()[0];
      destroy_process_group();
    } catch (const std::exception& e) {
      replacement_error = e.what();
    }
  });
  std::this_thread::sleep_for(milliseconds(1000));
  launcher.publish(2, "0,2");
  survivor_thread.join();
  replacement_thread.join();
  elastic::set_joined_membership(0);
  CHECK(survivor_error.empty());
  CHECK(replacement_error.empty());
  CHECK(duration<double>(steady_clock::now() - start).count() < 10.0); // the timeout is 20 s
  CHECK(replacement_rank == 1);
  CHECK(survivor_sum == 3.0f);
  CHECK(replacement_sum == 3.0f);
}
