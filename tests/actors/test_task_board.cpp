// Tests of the task board (Note [Task stealing] in actors/loader/task_board.cpp): which task a
// worker with nothing coming may take, and a worker that shares a board still answering a
// request.
#include <catch2/catch.hpp>

#include "actors/loader/plan.hpp"
#include "actors/loader/task_board.hpp"
#include "actors/loader/worker.hpp"
#include "core/data/dataset.hpp"
#include "core/ops/factory.hpp"

using namespace actorch::actors;

namespace {
index_batch task(uint64_t run_id, int64_t seq) {
  epoch_plan plan;
  plan.run_id = run_id;
  return make_task(plan, seq, {seq}, true);
}
} // namespace

TEST_CASE("a worker with nothing coming takes the earliest task no worker has begun",
          "[actors][loader]") {
  // See Note [Task stealing] in actors/loader/task_board.cpp.
  task_board board;
  board.post(task(3, 0), 0, 0);
  board.post(task(3, 1), 1, 0);
  board.post(task(3, 2), 0, 0);
  board.post(task(3, 3), 1, 0);
  CHECK(board.claim(task(3, 1), 1));
  CHECK_FALSE(board.next_for(3, 1)); // worker 1's task 3 is on its way
  CHECK(board.claim(task(3, 3), 1));
  CHECK_FALSE(board.next_for(2, 1)); // another run's: nothing
  // Worker 0 has not begun: its first task is its own, its second is not.
  auto taken = board.next_for(3, 1);
  REQUIRE(taken);
  CHECK(taken->seq == 2);
  CHECK(taken->indices == std::vector<int64_t>{2});
  CHECK_FALSE(board.next_for(3, 1)); // only worker 0's first is left
  CHECK(board.claim(task(3, 0), 0));
  CHECK_FALSE(board.next_for(3, 1));       // nothing left unclaimed
  CHECK_FALSE(board.claim(task(3, 2), 0)); // worker 0's message for it: skip
  CHECK_FALSE(board.claim(task(3, 2), 0)); // however often
  CHECK(board.claim(task(3, 9), 0));       // never posted: not on the board, load it

  std::vector<task_board::taken> takes;
  board.takes_since(takes);
  REQUIRE(takes.size() == 1);
  CHECK((takes[0].seq == 2 && takes[0].by == 1 && takes[0].attempt == 0));
  board.takes_since(takes);
  CHECK(takes.empty()); // reported once

  // Worker 0 dies holding batch 4 with batch 5 queued: neither can be taken until re-issued to
  // its heir (the same slot), whose first task, batch 4, is its own.
  board.post(task(3, 4), 0, 0);
  board.post(task(3, 5), 0, 0);
  CHECK(board.claim(task(3, 4), 0));
  board.freeze(0);
  CHECK_FALSE(board.next_for(3, 1));
  board.post(task(3, 4), 0, 1);
  board.post(task(3, 5), 0, 1);
  auto again = board.next_for(3, 1);
  REQUIRE(again);
  CHECK(again->seq == 5);
  CHECK_FALSE(board.next_for(3, 1));
  board.takes_since(takes);
  REQUIRE(takes.size() == 1);
  CHECK(takes[0].attempt == 1);
  CHECK(board.claim(task(3, 4), 0));
  CHECK_FALSE(board.claim(task(3, 5), 0)); // taken
  CHECK_FALSE(board.claim(task(3, 4), 1)); // not worker 1's

  // A new run drops the last one's postings; the workers have begun already.
  board.post(task(3, 6), 0, 0);
  board.post(task(4, 0), 1, 0);
  board.post(task(4, 1), 1, 0);
  CHECK_FALSE(board.next_for(4, 1)); // worker 1's own task is on its way
  CHECK(board.claim(task(3, 6), 1)); // the old run's posting is gone: not on the board
  auto next_run = board.next_for(4, 0);
  REQUIRE(next_run);
  CHECK(next_run->seq == 0);
  board.drop_posts();
  CHECK_FALSE(board.next_for(4, 0)); // nothing to take: worker 1's task 1 is gone too
}

TEST_CASE("a loader's worker still answers a request with its batch", "[actors][loader]") {
  // The source_actor contract: (load_atom, index_batch) -> loaded_batch. A worker sharing a
  // task board sends the coordinator's plain tasks back as messages (Note [Task stealing]); a
  // request must still get its response.
  class numbers : public actorch::data::dataset {
  public:
    int64_t size() const override { return 4; }
    actorch::data::sample get(int64_t i) const override {
      return actorch::data::sample(actorch::full({2}, double(i)));
    }
  };
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  worker_config w;
  w.dataset = std::make_shared<numbers>();
  w.recipe.pool = actorch::data::buffer_pool::make(actorch::cpu_allocator());
  w.shelf = std::make_shared<batch_shelf>();
  w.board = std::make_shared<task_board>();
  auto worker = spawn_dataset_worker(sys, w);
  caf::scoped_actor self{sys};
  index_batch t = task(1, 0);
  t.indices = {1, 3};
  loaded_batch got;
  bool answered = false;
  self->request(worker, std::chrono::seconds(5), load_atom::value, t)
      .receive(
          [&](loaded_batch& b) {
            got = std::move(b);
            answered = true;
          },
          [&](caf::error&) {});
  REQUIRE(answered);
  CHECK(got.error.empty());
  CHECK(got.seq == 0);
  CHECK(got.data.as_tensor().size(0) == 2);
  self->send_exit(worker, caf::exit_reason::user_shutdown);
}
