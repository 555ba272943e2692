// is_available, is_gloo_available, is_nccl_available, is_mpi_available and the reason a
// backend cannot be used, which init_process_group reports.
#include <catch2/catch.hpp>

#include "comm/distributed.hpp"
#include "comm/store/hash_store.hpp"
#include "tests/comm/ranks.hpp"

using namespace actorch::dist;
using actorch::test::error_of;
using Catch::Contains;

TEST_CASE("backend availability follows the build", "[comm][availability]") {
  CHECK(is_available());
  CHECK(is_gloo_available());
  CHECK(backend_unavailable_reason("gloo").empty());
  // NCCL comes with CUDA builds only.
  CHECK(is_nccl_available() == bool(ACTORCH_HAVE_CUDA));
  if (is_nccl_available())
    CHECK(backend_unavailable_reason("nccl").empty());
  else
    CHECK_THAT(backend_unavailable_reason("nccl"), Contains("this build has no CUDA"));
  CHECK_FALSE(is_mpi_available());
  CHECK_THAT(backend_unavailable_reason("mpi"), Contains("actorch has no MPI backend"));
  CHECK_THAT(backend_unavailable_reason("ucc"), Contains("unknown backend 'ucc'"));
}

TEST_CASE("init_process_group with the mpi backend fails with the reason", "[comm][availability]") {
  auto st = std::make_shared<hash_store>();
  const std::string msg = error_of(
      [&] { init_process_group({.backend = "mpi", .world_size = 1, .rank = 0, .store = st}); });
  CHECK_THAT(msg, Contains("init_process_group: the mpi backend is not available: actorch has "
                           "no MPI backend"));
  CHECK_FALSE(is_initialized());
}
