// Tests of core/data/collate: default_collate's rules (stack, numbers to tensors, strings kept,
// tuples and dicts element-wise), its errors naming the sample and element, the collator that
// does it one sample at a time, the buffer pool's recycling, and pin_memory.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/data/collate.hpp"
#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using actorch::test::ints_of;
using actorch::test::values_of;
using Catch::Contains;

TEST_CASE("default_collate stacks tensors and turns numbers into tensors", "[data][collate]") {
  std::vector<sample> batch;
  const char* names[] = {"s0", "s1", "s2"};
  for (int64_t i = 0; i < 3; ++i)
    batch.push_back(sample::make_tuple({arange(i, i + 2), i, double(i) / 2, names[i], i % 2 == 0,
                                        sample::make_dict({{"x", arange(2).add(i * 10).t()}})}));
  sample b = default_collate(batch);
  REQUIRE(b.size() == 6);
  CHECK(b[0].as_tensor().sizes() == shape_t{3, 2});
  CHECK(ints_of(b[0].as_tensor()) == std::vector<int64_t>{0, 1, 1, 2, 2, 3});
  CHECK(b[1].as_tensor().dtype() == dtype::int64);
  CHECK(ints_of(b[1].as_tensor()) == std::vector<int64_t>{0, 1, 2});
  CHECK(b[2].as_tensor().dtype() == dtype::float64);
  CHECK(values_of(b[2].as_tensor()) == std::vector<double>{0, 0.5, 1});
  CHECK(b[3][2].as_string() == "s2");
  CHECK(b[4].as_tensor().dtype() == dtype::bool_);
  CHECK(ints_of(b[4].as_tensor()) == std::vector<int64_t>{1, 0, 1});
  CHECK(ints_of(b[5]["x"].as_tensor()) == std::vector<int64_t>{0, 1, 10, 11, 20, 21});
}

TEST_CASE("default_collate copies non-contiguous samples correctly", "[data][collate]") {
  tensor m = arange(6).view({2, 3});
  sample b = default_collate({sample(m.t()), sample(m.t())});
  CHECK(b.as_tensor().sizes() == shape_t{2, 3, 2});
  CHECK(ints_of(b.as_tensor()) == std::vector<int64_t>{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5});
}

TEST_CASE("default_collate stacks empty tensors", "[data][collate]") {
  auto pool = buffer_pool::make(cpu_allocator());
  sample b = default_collate({sample(zeros({0})), sample(zeros({0})), sample(zeros({0}))});
  CHECK(b.as_tensor().sizes() == shape_t{3, 0});
  sample c = default_collate({sample(zeros({2, 0})), sample(zeros({2, 0}))}, pool.get());
  CHECK(c.as_tensor().sizes() == shape_t{2, 2, 0});
}

TEST_CASE("default_collate names the sample and the element it cannot collate", "[data][collate]") {
  CHECK_THROWS_WITH(
      default_collate({sample(zeros({2, 3})), sample(zeros({2, 3})), sample(zeros({2, 4}))}),
      Contains("batch: stack expects each tensor to be equal size, but sample 0 has "
               "shape [2, 3] and sample 2 has shape [2, 4]"));
  CHECK_THROWS_WITH(
      default_collate({sample::make_dict({{"a", 1}}), sample::make_dict({{"a", "x"}})}),
      Contains("batch['a']: sample 0 is a int but sample 1 is a str"));
  CHECK_THROWS_WITH(default_collate({sample::make_dict({{"a", 1}}), sample::make_dict({{"b", 1}})}),
                    Contains("key 'a' of sample 0 is missing from sample 1"));
  // Sample 0's keys only, as torch's: another sample's other keys are left out.
  const sample kept =
      default_collate({sample::make_dict({{"a", 1}}), sample::make_dict({{"b", "x"}, {"a", 2}})});
  REQUIRE(kept.as_dict().size() == 1);
  CHECK(ints_of(kept.as_dict()[0].second.as_tensor()) == std::vector<int64_t>{1, 2});
  CHECK_THROWS_WITH(default_collate({sample::make_tuple({1, 2}), sample::make_tuple({1})}),
                    Contains("should be of equal size"));
  CHECK_THROWS_WITH(default_collate({sample(), sample()}), Contains("found None"));
}

namespace {

// A value of the user's; `sequence`: it says it batches as strings do (Python's bytes).
struct opaque : custom_value {
  explicit opaque(bool sequence, int id) : sequence_(sequence), id_(id) {}
  std::string type_name() const override { return sequence_ ? "Blob" : "Thing"; }
  void for_each_tensor(const std::function<void(tensor&)>&) override {}
  bool collates_as_sequence() const override { return sequence_; }
  bool sequence_;
  int id_;
};

int opaque_id(const sample& s) {
  return static_cast<const opaque*>(s.as_custom().get())->id_;
}

} // namespace

TEST_CASE("values that collate as a sequence are batched into the sequence of them, as strings",
          "[data][collate]") {
  const sample batch =
      default_collate({sample::make_tuple({sample(std::make_shared<opaque>(true, 0)), 1}),
                       sample::make_tuple({sample(std::make_shared<opaque>(true, 1)), 2})});
  const auto& blobs = batch[0].as_tuple();
  REQUIRE(blobs.size() == 2);
  CHECK(opaque_id(blobs[0]) == 0);
  CHECK(opaque_id(blobs[1]) == 1);
  CHECK(ints_of(batch[1].as_tensor()) == std::vector<int64_t>{1, 2});
  // Whatever follows (torch returns a batch of bytes or strings as it is).
  const sample mixed = default_collate({sample(std::make_shared<opaque>(true, 0)),
                                        sample(std::make_shared<opaque>(false, 1)), sample(3)});
  REQUIRE(mixed.size() == 3);
  CHECK(opaque_id(mixed[1]) == 1);
  CHECK(mixed[2].as_int() == 3);
  CHECK_THROWS_WITH(default_collate({sample(std::make_shared<opaque>(false, 0))}),
                    Contains("found a Thing (a type of your own"));
}

TEST_CASE("numbers of mixed kinds collate as torch.tensor types them, from the first sample",
          "[data][collate]") {
  // Note [Mixed numbers in a batch]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A float first gives float64; otherwise bools stay bool,
  // bools and ints give int64, and a float among them float32 (torch's default dtype).
  auto pool = buffer_pool::make(cpu_allocator());
  const auto collated = [&](std::vector<sample> b) {
    return default_collate(std::move(b), pool.get()).as_tensor();
  };
  tensor t = collated({0, 0.5, true});
  CHECK(t.dtype() == dtype::float32);
  CHECK(actorch::test::values_of(t) == std::vector<double>{0, 0.5, 1});
  t = collated({0.5, 2, false});
  CHECK(t.dtype() == dtype::float64);
  CHECK(actorch::test::values_of(t) == std::vector<double>{0.5, 2, 0});
  t = collated({true, 3, int64_t(1) << 60});
  CHECK(t.dtype() == dtype::int64);
  CHECK(t.data_ptr<int64_t>()[2] == int64_t(1) << 60); // exact, not through a double
  CHECK(t.data_ptr<int64_t>()[0] == 1);
  t = collated({true, false});
  CHECK(t.dtype() == dtype::bool_);
  t = collated({true, 2, 2.5});
  CHECK(t.dtype() == dtype::float32);
  CHECK(actorch::test::values_of(t) == std::vector<double>{1, 2, 2.5});
}

TEST_CASE("tensors of mixed dtypes are promoted, or in a worker cast to sample 0's, as torch's",
          "[data][collate]") {
  // Note [Mixed dtypes in a stack].
  auto pool = buffer_pool::make(cpu_allocator());
  const auto collated = [&](std::vector<sample> b) {
    return default_collate(std::move(b), pool.get()).as_tensor();
  };
  const tensor i32 = full({2}, 3.0, {.dtype = dtype::int32});
  const tensor f32 = full({2}, 0.5);
  const tensor f64 = full({2}, 0.1, {.dtype = dtype::float64});
  const tensor flag = full({2}, 1.0, {.dtype = dtype::bool_});
  tensor t = collated({i32, f32, f64}); // widened twice, the rows so far converted
  CHECK(t.dtype() == dtype::float64);
  CHECK(actorch::test::values_of(t) == std::vector<double>{3, 3, 0.5, 0.5, 0.1, 0.1});
  t = collated({f64, i32, flag}); // narrower ones converted into their rows
  CHECK(t.dtype() == dtype::float64);
  CHECK(actorch::test::values_of(t) == std::vector<double>{0.1, 0.1, 3, 3, 1, 1});
  CHECK(collated({flag, i32}).dtype() == dtype::int32);

  worker_info info;
  worker_scope in_a_worker(&info);
  t = collated({f32, f64, i32});
  CHECK(t.dtype() == dtype::float32);
  CHECK(actorch::test::values_of(t) == std::vector<double>{0.5, 0.5, 0.1f, 0.1f, 3, 3});
  CHECK_THROWS_WITH(collated({i32, f32}),
                    Contains("batch: in a worker, sample 0's dtype is the batch's") &&
                        Contains("sample 1's float32 can't be cast to int32"));
  CHECK_THROWS_WITH(collated({flag, i32}), Contains("sample 1's int32 can't be cast to bool"));
}

TEST_CASE("a collator collates one sample at a time and keeps none of them", "[data][collate]") {
  auto pool = buffer_pool::make(cpu_allocator());
  collator into(3, pool.get());
  std::vector<std::weak_ptr<storage>> given;
  for (int64_t i = 0; i < 3; ++i) {
    tensor x = full({2}, double(i));
    given.push_back(x.storage());
    into.add(sample::make_dict({{"x", x}, {"y", sample::make_tuple({i, i * 0.5, "s"})}}));
    // The batch's buffers are taken at sample 0: x's, and the two numbers'.
    CHECK(pool->get_stats().live == 3);
  }
  CHECK(std::all_of(given.begin(), given.end(), [](const auto& w) { return w.expired(); }));
  sample b = into.finish();
  CHECK(values_of(b.as_dict()[0].second.as_tensor()) == std::vector<double>{0, 0, 1, 1, 2, 2});
  const auto& y = b.as_dict()[1].second.as_tuple();
  CHECK(ints_of(y[0].as_tensor()) == std::vector<int64_t>{0, 1, 2});
  CHECK(y[1].as_tensor().dtype() == dtype::float64);
  CHECK(values_of(y[1].as_tensor()) == std::vector<double>{0, 0.5, 1});
  CHECK(y[2].as_tuple().size() == 3);
  CHECK_THROWS_WITH(into.add(sample(1)), Contains("add() after finish()"));
}

TEST_CASE("a collator names the sample that breaks the batch and the count it was promised",
          "[data][collate]") {
  CHECK_THROWS_WITH(collator(0), Contains("default_collate: empty batch"));
  CHECK_THROWS_WITH(collator(2).finish(), Contains("default_collate: empty batch"));

  // A stream's short last batch: the first rows of the buffers.
  collator short_batch(3);
  short_batch.add(sample::make_tuple({full({2}, 7.0), 5}));
  sample b = short_batch.finish();
  CHECK(b[0].as_tensor().sizes() == shape_t{1, 2});
  CHECK(values_of(b[0].as_tensor()) == std::vector<double>{7, 7});
  CHECK(ints_of(b[1].as_tensor()) == std::vector<int64_t>{5});

  collator full_batch(1);
  full_batch.add(sample(1));
  CHECK_THROWS_WITH(full_batch.add(sample(2)), Contains("sample 1 added to a batch of 1"));

  auto pool = buffer_pool::make(cpu_allocator());
  {
    collator bad(4, pool.get());
    bad.add(sample::make_tuple({ones({2}), 1}));
    bad.add(sample::make_tuple({ones({2}), 2}));
    CHECK_THROWS_WITH(bad.add(sample::make_tuple({ones({3}), 3})),
                      Contains("batch[0]: stack expects each tensor to be equal size, but sample 0 "
                               "has shape [2] and sample 2 has shape [3]"));
    CHECK_THROWS_WITH(bad.add(sample::make_tuple({ones({2}), 4})), Contains("after an error"));
  }
  CHECK(pool->get_stats().live == 0); // the half-filled batch went back to the pool
}

TEST_CASE("batches from a buffer pool recycle their memory", "[data][collate]") {
  auto pool = buffer_pool::make(cpu_allocator());
  const void* first = nullptr;
  for (int round = 0; round < 5; ++round) {
    sample b = default_collate({sample(ones({4})), sample(ones({4}))}, pool.get());
    if (round == 0)
      first = b.as_tensor().data_ptr();
    CHECK(b.as_tensor().data_ptr() == first); // the same buffer every round
    CHECK(pool->get_stats().live == 1);
  }
  auto st = pool->get_stats();
  CHECK(st.live == 0);
  CHECK(st.allocations == 1);
  CHECK(st.reuses == 4);
  CHECK(st.peak_live == 1);
}

TEST_CASE("a thread gets back the pooled buffer it filled before another's", "[data][collate]") {
  // Note [Buffer affinity]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // Two threads each fill a buffer; both go back to the pool, the
  // other thread's last. Each thread then gets its own again, not the most recent one.
  auto pool = buffer_pool::make(cpu_allocator());
  const void* mine = nullptr;
  const void* theirs = nullptr;
  {
    tensor a = pool->empty({256}, dtype::float32);
    mine = a.data_ptr();
    tensor b;
    std::thread([&] { b = pool->empty({256}, dtype::float32); }).join();
    theirs = b.data_ptr();
    REQUIRE(mine != theirs);
    a = tensor();
    b = tensor(); // released last: plain LIFO would hand out `theirs` next
  }
  tensor again = pool->empty({256}, dtype::float32);
  CHECK(again.data_ptr() == mine);
  // None of its own left: the other thread's, rather than a new allocation.
  CHECK(pool->empty({256}, dtype::float32).data_ptr() == theirs);
  CHECK(pool->get_stats().allocations == 2);
}

namespace {

/// Whether every whole page inside [p, p + nbytes) is mapped (mincore).
bool pages_resident(const void* p, size_t nbytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (uintptr_t(p) + nbytes) & ~(page - 1);
  std::vector<unsigned char> in((end - begin) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) == 0);
  return std::all_of(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; });
}

} // namespace

TEST_CASE("a fresh pooled buffer has its pages mapped before anything writes it",
          "[data][collate]") {
  // Note [Buffer prefault]. The kernel needs MADV_POPULATE_WRITE (Linux 5.14); probe it.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* probe =
      mmap(nullptr, 32 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(probe != MAP_FAILED);
#ifdef MADV_POPULATE_WRITE
  const bool supported = madvise(probe, 32 * page, MADV_POPULATE_WRITE) == 0;
#else
  const bool supported = false;
#endif
  munmap(probe, 32 * page);
  if (!supported) {
    WARN("this kernel has no MADV_POPULATE_WRITE: pooled buffers fault in page by page");
    return;
  }
  auto pool = buffer_pool::make(cpu_allocator());
  // 768 KiB, one loader batch of 64x3x32x32 floats: above the malloc mmap threshold, so fresh
  // pages that nothing has touched yet.
  tensor a = pool->empty({64, 3, 32, 32}, dtype::float32);
  CHECK(pages_resident(a.data_ptr(), size_t(a.numel()) * 4));
}

TEST_CASE("pin_memory copies every tensor into the pool and keeps other values",
          "[data][collate]") {
  auto pool = buffer_pool::make(pinned_allocator());
  sample s = sample::make_tuple({arange(3), "k", sample::make_dict({{"y", ones({2})}})});
  sample p = pin_memory(s, *pool);
  CHECK(p[0].as_tensor().data_ptr() != s[0].as_tensor().data_ptr());
  CHECK(equal(p, s));
  CHECK(pool->get_stats().live == 2);
}

TEST_CASE("pin_memory passes an allocation failure on and lends out nothing", "[data][collate]") {
  // Pinned memory can run out (cudaHostAlloc fails, the driver's limit on locked pages): the
  // error travels up to the loader, which names the batch, and what was pinned before the
  // failure goes back to the pool.
  class failing_allocator final : public allocator {
  public:
    explicit failing_allocator(int succeed) : left_(succeed) {}
    void* allocate(size_t nbytes) override {
      if (left_-- <= 0)
        throw std::runtime_error("pinned allocator: cudaHostAlloc of " + std::to_string(nbytes) +
                                 " bytes failed: out of memory");
      return cpu_allocator()->allocate(nbytes);
    }
    void deallocate(void* p, size_t nbytes) noexcept override {
      cpu_allocator()->deallocate(p, nbytes);
    }
    actorch::device device() const override { return kCPU; }
    std::string_view name() const override { return "failing"; }

  private:
    int left_;
  };
  const sample s = sample::make_tuple({arange(3), ones({2, 2})});
  failing_allocator none(0);
  CHECK_THROWS_WITH(pin_memory(s, *buffer_pool::make(&none)),
                    Contains("cudaHostAlloc of 24 bytes failed: out of memory"));
  failing_allocator one(1); // the second tensor's buffer fails
  auto pool = buffer_pool::make(&one);
  CHECK_THROWS_WITH(pin_memory(s, *pool), Contains("cudaHostAlloc of 16 bytes failed"));
  const auto st = pool->get_stats();
  CHECK(st.live == 0);
  CHECK(st.live_bytes == 0);
  CHECK(st.allocations == 1);
  tensor again = pool->empty({3}, dtype::int64); // the first tensor's buffer, back in the pool
  CHECK(pool->get_stats().reuses == 1);
}

TEST_CASE("batch generators are seeded from (base seed, epoch, batch index)", "[data][collate]") {
  CHECK(get_worker_info() == nullptr);
  double a, b, c;
  {
    batch_scope scope(batch_seed(1, 0, 5));
    a = rand({1}, {}, &batch_generator()).item<double>();
  }
  {
    batch_scope scope(batch_seed(1, 0, 5));
    b = rand({1}, {}, &batch_generator()).item<double>();
  }
  {
    batch_scope scope(batch_seed(1, 0, 6));
    c = rand({1}, {}, &batch_generator()).item<double>();
  }
  CHECK(a == b);
  CHECK(a != c);
  CHECK(&batch_generator() == &default_generator());
}
