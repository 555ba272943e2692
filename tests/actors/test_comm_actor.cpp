// The comm actor, which issues trainer actors' cross-process all-reduces on its own thread,
// carries the submitting thread's collective_tag to the process group's ledger: a collective a
// missing rank holds up is named in the roll call by what it is for.
#include <catch2/catch.hpp>

#include <future>

#include "actors/comm_actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "comm/collective_tag.hpp"
#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("the comm actor's collectives carry the trainer thread's tag into the roll call") {
  const auto errors = on_ranks<std::string>(
      2,
      [](int r, dist::process_group_gloo& pg) {
        caf::actor_system_config cfg;
        caf::actor_system sys{cfg};
        auto exchange = actors::spawn_comm_actor(sys, unowned(pg));
        auto submit = [&](uint64_t seq) {
          auto result = std::make_shared<std::promise<std::exception_ptr>>();
          dist::collective_tag tag("DDP bucket 7");
          exchange->submit(seq, zeros({4}), dist::reduce_op::sum,
                           [result](std::exception_ptr e) { result->set_value(e); });
          return result->get_future();
        };
        std::string out;
        if (auto e = submit(0).get())
          return std::string("collective 0 failed");
        if (r == 1) { // rank 1 never submits collective 1: rank 0 waits for it
          std::this_thread::sleep_for(std::chrono::milliseconds(3500));
          return out;
        }
        if (auto e = submit(1).get())
          out = error_of([&] { std::rethrow_exception(e); });
        return out;
      },
      short_timeout(2500));
  CHECK_THAT(errors[0], Contains("Roll call: ") && Contains("all_reduce #1 (DDP bucket 7)"));
}
