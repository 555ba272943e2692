// Tests of comm/elastic: the membership lists the launcher writes and the ranks read, and what a
// process outside an elastic launcher is told (Note [Elastic membership] in
// comm/launch/launcher.cpp; the healing itself is tests/tools/digits_elastic.py's).
#include <catch2/catch.hpp>

#include "comm/elastic.hpp"
#include "tests/core/files.hpp"

using namespace actorch::dist;
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
