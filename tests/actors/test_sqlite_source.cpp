// Tests of the SQLite source example: a user's actor in place of the worker pool, behind the
// same loader (shuffle, collate, in_order, errors), plus a consumer actor receiving batches.
#include <catch2/catch.hpp>

#include <filesystem>

#include <sqlite3.h>

#include "actors/source_loader.hpp"
#include "caf/all.hpp"
#include "examples/sqlite_source.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using Catch::Contains;

namespace {
/// The scratch path of database `name` (appended: GCC 12 flags `+` here with -Warray-bounds).
std::string db_path(const std::string& name) {
  std::string path = ACTORCH_TEST_TMP;
  path.append("/").append(name);
  return path;
}

/// A database of n samples in its own file: CTest runs the test cases of this file at once.
std::string make_db(const std::string& name, int n) {
  const std::string path = db_path(name);
  std::vector<std::vector<float>> features;
  std::vector<int64_t> labels;
  for (int i = 0; i < n; ++i) {
    features.push_back({float(i), float(i) + 0.5f, float(-i)});
    labels.push_back(i);
  }
  examples::write_sqlite_samples(path, features, labels);
  return path;
}
} // namespace

TEST_CASE("an SQLite source actor feeds the loader in place of the workers", "[actors][sqlite]") {
  const std::string path = make_db("feeds_the_loader.db", 50);
  CHECK(examples::sqlite_sample_count(path) == 50);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto source = examples::spawn_sqlite_source(sys, path);
  {
    auto loader = make_source_loader(
        sys, source, 50,
        {.batch_size = 8, .shuffle = true, .generator = std::make_shared<generator>(1)});
    CHECK(loader.size() == 7);
    std::vector<int64_t> seen;
    for (const auto& b : loader) {
      const tensor& x = b[0].as_tensor();
      const auto y = test::ints_of(b[1].as_tensor());
      CHECK(x.size(1) == 3);
      for (size_t r = 0; r < y.size(); ++r) {
        CHECK(test::values_of(x[int64_t(r)]) ==
              std::vector<double>{double(y[r]), double(y[r]) + 0.5, -double(y[r])});
        seen.push_back(y[r]);
      }
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(50);
    std::iota(all.begin(), all.end(), int64_t(0));
    CHECK(seen == all);

    SECTION("a missing row is an error naming the index") {
      auto bad = make_source_loader(sys, source, 60, {.batch_size = 10});
      CHECK_THROWS_WITH(
          [&] {
            for (const auto& b : bad)
              (void)b;
          }(),
          Contains("sqlite source failed on sample index 50 (batch 5): no row with id 50"));
    }
  }
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
}

TEST_CASE("an SQLite source refuses a row it cannot read as a sample", "[actors][sqlite]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto check_bad_row = [&](const char* name, const char* set, const char* what) {
    const std::string path = make_db(name, 8);
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    const std::string sql = std::string("UPDATE samples SET ") + set + " WHERE id = 5";
    CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto source = examples::spawn_sqlite_source(sys, path);
    {
      auto loader = make_source_loader(sys, source, 8, {.batch_size = 4});
      CHECK_THROWS_WITH(
          [&] {
            for (const auto& b : loader)
              (void)b;
          }(),
          Contains("sqlite source failed on sample index 5 (batch 1): row with id 5") &&
              Contains(what));
    }
    caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
  };
  // A blob of 6 bytes once filled a tensor of one float32 with all six.
  check_bad_row("blob_6_bytes.db", "features = x'010203040506'",
                "features holds 6 bytes, not a whole number of float32 values");
  check_bad_row("null_features.db", "features = NULL", "features is not a blob");
  check_bad_row("text_label.db", "label = 'seven'", "label is not an integer");
  // What write_sqlite_samples writes for a row with no features is an empty blob, not NULL.
  const std::string empty = db_path("empty_features.db");
  examples::write_sqlite_samples(empty, {{}, {}}, {4, 7});
  auto source = examples::spawn_sqlite_source(sys, empty);
  {
    auto loader = make_source_loader(sys, source, 2, {.batch_size = 2});
    std::vector<int64_t> labels;
    for (const auto& b : loader) {
      CHECK(b[0].as_tensor().sizes() == shape_t{2, 0});
      labels = test::ints_of(b[1].as_tensor());
    }
    CHECK(labels == std::vector<int64_t>{4, 7});
  }
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
}

TEST_CASE("an SQLite file that cannot be opened says why", "[actors][sqlite]") {
  CHECK_THROWS_WITH(examples::sqlite_sample_count(db_path("missing.db")),
                    Contains("sqlite: cannot open " + db_path("missing.db")) &&
                        Contains("(No such file or directory)"));
  const std::string dir = db_path("a_directory.db");
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH(examples::sqlite_sample_count(dir),
                    Contains("sqlite: cannot open " + dir) && Contains("(Is a directory)"));
}

TEST_CASE("a consumer actor gets the batches as messages and returns credits", "[actors][sqlite]") {
  const std::string path = make_db("consumer_actor.db", 40);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto source = examples::spawn_sqlite_source(sys, path);
  auto loader = make_source_loader(sys, source, 40, {.batch_size = 4, .prefetch_factor = 1});
  caf::scoped_actor self{sys};
  loader.run_epoch(self);
  std::vector<int64_t> labels;
  bool done = false;
  while (!done) {
    self->receive(
        [&](actors::batch_atom, const actors::delivery& d) {
          REQUIRE(d.error.empty());
          if (d.end_of_epoch) {
            done = true;
            return;
          }
          for (auto v : test::ints_of(d.data[1].as_tensor()))
            labels.push_back(v);
          self->send(caf::actor_cast<caf::actor>(self->current_sender()),
                     actors::credit_atom::value, d.run_id);
        },
        caf::after(std::chrono::seconds(5)) >> [&] { FAIL("no batch within 5 s"); });
  }
  std::vector<int64_t> all(40);
  std::iota(all.begin(), all.end(), int64_t(0));
  CHECK(labels == all); // sequential sampler, in order
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
}
