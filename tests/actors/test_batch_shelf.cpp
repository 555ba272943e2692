// Tests of the batch shelf (Note [Batch shelf] in actors/loader/batch_shelf.cpp): what a worker
// may leave there instead of replying, and what the consumer's thread collects.
#include <catch2/catch.hpp>

#include "actors/loader/batch_shelf.hpp"

using namespace actorch::actors;

namespace {
loaded_batch batch(uint64_t run_id, int64_t seq) {
  loaded_batch b;
  b.run_id = run_id;
  b.seq = seq;
  b.worker = 1;
  return b;
}
} // namespace

TEST_CASE("the shelf keeps only batches of its run that the consumer is not waiting for",
          "[actors][loader]") {
  batch_shelf shelf;
  auto b = batch(3, 5);
  CHECK_FALSE(shelf.offer(b, nullptr)); // closed: no run yet
  CHECK(shelf.wait_for(3, 4).empty());
  CHECK(shelf.offer(b, nullptr)); // run 3, not batch 4: kept
  auto wanted = batch(3, 4);
  CHECK_FALSE(shelf.offer(wanted, nullptr)); // the consumer waits for it: a reply
  CHECK(wanted.seq == 4);                    // and left as it was
  auto stale = batch(2, 6);
  CHECK_FALSE(shelf.offer(stale, nullptr)); // another run's
  auto failed = batch(3, 7);
  failed.error = "DataLoader worker 1 failed on sample index 9";
  CHECK_FALSE(shelf.offer(failed, nullptr)); // errors always travel as replies
  auto end = batch(3, 8);
  end.end_of_data = true;
  CHECK_FALSE(shelf.offer(end, nullptr));
  auto six = batch(3, 6);
  CHECK(shelf.offer(six, nullptr));

  auto items = shelf.wait_for(3, 5);
  REQUIRE(items.size() == 2);
  CHECK(items[0].batch.seq == 5);
  CHECK(items[1].batch.seq == 6);
  CHECK(items[0].batch.worker == 1);
  CHECK(shelf.wait_for(3, 5).empty()); // collecting empties it
  auto five = batch(3, 5);
  CHECK_FALSE(shelf.offer(five, nullptr)); // now the wanted one

  shelf.wait_for(0, -1); // the run ended: closed again
  auto late = batch(3, 9);
  CHECK_FALSE(shelf.offer(late, nullptr));
}
