// The shared-memory all-reduce's set-up when it cannot be used (Note [Shared segment checks]):
// a segment name planted in an open store before rank 0's, naming no segment or a stranger's.
// Every rank must fall back to TCP together, log why, and still reduce correctly.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
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

// A store in which a stranger's shm/name came first: rank 0's own write of it is lost, as when
// the other ranks read the planted key before rank 0 wrote it.
class planted_store final : public forwarding_store {
public:
  explicit planted_store(const std::string& planted)
      : forwarding_store(std::chrono::milliseconds(5000)) {
    inner_.set(kName, planted);
  }
  void set(const std::string& key, const std::string& value) override {
    if (key != kName)
      inner_.set(key, value);
  }

private:
  static constexpr const char* kName = "pg/shm/name";
};

std::vector<std::vector<double>> all_reduce_on(std::shared_ptr<store> st) {
  return on_ranks<std::vector<double>>(
      2,
      [](int r, process_group_gloo& pg) {
        tensor t = full({1000}, double(r + 1));
        pg.all_reduce(t, reduce_op::sum).wait();
        return values_of(t);
      },
      short_timeout(5000), std::move(st));
}

} // namespace

TEST_CASE("a planted shared-memory segment name makes every rank fall back to TCP, saying why",
          "[comm][gloo][shm]") {
  const auto dir = scratch_dir("shm_fallback");
  SECTION("a name of no segment") {
    stderr_capture err((dir / "none.log").string());
    const auto got = all_reduce_on(std::make_shared<planted_store>("/actorch_planted_nothing"));
    CHECK(got[0] == std::vector<double>(1000, 3.0));
    CHECK(got[1] == std::vector<double>(1000, 3.0));
    const std::string log = err.text();
    CHECK_THAT(log, Contains("rank 1 of group [0, 1]: collectives do not use shared memory "
                             "(cannot map the shared segment rank 0 named (its key shm/name): "
                             "shm_open('/actorch_planted_nothing')"));
    CHECK_THAT(log, Contains("rank 0 of group [0, 1]: collectives do not use shared memory "
                             "(another rank could not map or verify"));
  }
  SECTION("a stranger's segment, which the other ranks map") {
    const std::string name = "/actorch_planted_" + std::to_string(::getpid());
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(64) << 20) == 0);
    ::close(fd);
    stderr_capture err((dir / "stranger.log").string());
    const auto got = all_reduce_on(std::make_shared<planted_store>(name));
    ::shm_unlink(name.c_str());
    CHECK(got[0] == std::vector<double>(1000, 3.0));
    CHECK(got[1] == std::vector<double>(1000, 3.0));
    const std::string log = err.text();
    CHECK_THAT(log, Contains("rank 0 of group [0, 1]: collectives do not use shared memory "
                             "(rank 1 mapped another segment than this rank did"));
    CHECK_THAT(log, Contains("rank 1 of group [0, 1]: collectives do not use shared memory "
                             "(rank 0 mapped another segment than this rank did ('" +
                             name + "'"));
  }
}
