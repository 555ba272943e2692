// Every collective of process_group_gloo, for worlds of 2 and 3 ranks run as threads, against
// values computed here independently (rank r contributes values that depend on r).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using V = std::vector<double>;
using I = std::vector<int64_t>;
using Catch::Contains;

namespace {

// Rank r's contribution to element i of the reduce tests: small distinct integers.
int64_t contrib(int r, int64_t i) {
  return (r + 1) * (i + 2) + r % 2;
}

int64_t expected_reduce(reduce_op op, int world, int64_t i) {
  int64_t acc = contrib(0, i);
  for (int r = 1; r < world; ++r) {
    const int64_t x = contrib(r, i);
    switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: acc += x; break;
    case reduce_op::product: acc *= x; break;
    case reduce_op::min: acc = std::min(acc, x); break;
    case reduce_op::max: acc = std::max(acc, x); break;
    case reduce_op::band: acc &= x; break;
    case reduce_op::bor: acc |= x; break;
    case reduce_op::bxor: acc ^= x; break;
    }
  }
  return acc;
}

tensor rank_tensor(int r, int64_t n, dtype dt) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = contrib(r, i);
  return as_tensor(v).to(dt);
}

} // namespace

TEST_CASE("all_reduce applies every ReduceOp across ranks", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  // Through shared memory (ranks on one host) and through Gloo's TCP ring.
  auto opts = actorch::test::short_timeout();
  opts.shared_memory = GENERATE(true, false);
  const auto op = GENERATE(reduce_op::sum, reduce_op::avg, reduce_op::product, reduce_op::min,
                           reduce_op::max, reduce_op::band, reduce_op::bor, reduce_op::bxor);
  const bool bitwise = op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
  const dtype dt = bitwise ? dtype::int32 : dtype::float64;
  INFO("world " << world << " op " << reduce_op_name(op));
  auto got = on_ranks<V>(
      world,
      [&](int r, process_group_gloo& pg) {
        tensor t = rank_tensor(r, 5, dt);
        pg.all_reduce(t, op).wait();
        return values_of(t);
      },
      opts);
  V want;
  for (int64_t i = 0; i < 5; ++i)
    want.push_back(op == reduce_op::avg ? double(expected_reduce(op, world, i)) / world
                                        : double(expected_reduce(op, world, i)));
  for (int r = 0; r < world; ++r)
    CHECK(actorch::test::close(got[size_t(r)], want));
}

TEST_CASE("all_reduce works for every dtype and non-contiguous tensors", "[comm][gloo]") {
  const auto dt = GENERATE(dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                           dtype::int8, dtype::uint8, dtype::int32, dtype::int64);
  INFO("dtype " << dtype_name(dt));
  auto got = on_ranks<V>(3, [&](int r, process_group_gloo& pg) {
    // A transposed 2x3 view: non-contiguous, so the group copies in and back.
    tensor base = rank_tensor(r, 6, dt).view({3, 2});
    tensor t = base.t();
    pg.all_reduce(t, reduce_op::sum).wait();
    return values_of(base.flatten());
  });
  V want;
  for (int64_t i = 0; i < 6; ++i)
    want.push_back(double(expected_reduce(reduce_op::sum, 3, i)));
  for (const auto& g : got)
    CHECK(g == want);
}

TEST_CASE("all_reduce on bool tensors: SUM is OR, PRODUCT is AND", "[comm][gloo]") {
  auto got = on_ranks<std::vector<I>>(2, [](int r, process_group_gloo& pg) {
    std::vector<I> out;
    for (auto op : {reduce_op::sum, reduce_op::product, reduce_op::bxor}) {
      tensor t = as_tensor(std::vector<bool>{true, r == 0, false});
      pg.all_reduce(t, op).wait();
      out.push_back(ints_of(t));
    }
    return out;
  });
  for (const auto& g : got) {
    CHECK(g[0] == I{1, 1, 0});
    CHECK(g[1] == I{1, 0, 0});
    CHECK(g[2] == I{0, 1, 0});
  }
}

TEST_CASE("all_reduce MAX and MIN propagate a NaN from any rank, as maximum and minimum do",
          "[comm][gloo]") {
  const double nan = std::nan("");
  const V mine[2] = {{nan, 1, 4}, {2, nan, 3}}; // a NaN on each side
  auto opts = actorch::test::short_timeout();
  opts.shared_memory = GENERATE(true, false);
  INFO("shared memory " << opts.shared_memory);
  auto got = on_ranks<std::vector<V>>(
      2,
      [&](int r, process_group_gloo& pg) {
        std::vector<V> out;
        for (auto op : {reduce_op::max, reduce_op::min}) {
          tensor t = as_tensor(mine[r]);
          pg.all_reduce(t, op).wait();
          out.push_back(values_of(t));
        }
        return out;
      },
      opts);
  const tensor a = as_tensor(mine[0]), b = as_tensor(mine[1]);
  const V want_max = values_of(maximum(a, b)), want_min = values_of(minimum(a, b));
  for (const auto& g : got) {
    CHECK(std::isnan(g[0][0]));
    CHECK(std::isnan(g[0][1]));
    CHECK(g[0][2] == want_max[2]);
    CHECK(std::isnan(g[1][0]));
    CHECK(std::isnan(g[1][1]));
    CHECK(g[1][2] == want_min[2]);
    CHECK((std::isnan(want_max[0]) && std::isnan(want_max[1]) && std::isnan(want_min[1])));
  }
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  const int root = world - 1;
  auto got = on_ranks<V>(world, [&](int r, process_group_gloo& pg) {
    tensor t = full({2, 2}, double(r * 10 + 1));
    pg.broadcast(t, root).wait();
    return values_of(t);
  });
  for (const auto& g : got)
    CHECK(g == V(4, root * 10 + 1));
}

TEST_CASE("reduce leaves the result on the root only", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  auto got = on_ranks<I>(world, [&](int r, process_group_gloo& pg) {
    tensor t = rank_tensor(r, 4, dtype::int64);
    pg.reduce(t, 1, reduce_op::max).wait();
    return ints_of(t);
  });
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < 4; ++i)
      CHECK(got[size_t(r)][size_t(i)] ==
            (r == 1 ? expected_reduce(reduce_op::max, world, i) : contrib(r, i)));
}

TEST_CASE("all_gather and all_gather_into_tensor collect every rank's tensor", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  auto got = on_ranks<std::vector<V>>(world, [&](int r, process_group_gloo& pg) {
    tensor in = full({2}, double(r));
    std::vector<tensor> outs;
    for (int i = 0; i < world; ++i)
      outs.push_back(empty({2}));
    pg.all_gather(outs, in).wait();
    tensor flat = empty({world, 2});
    pg.all_gather_into_tensor(flat, in).wait();
    std::vector<V> res;
    for (auto& o : outs)
      res.push_back(values_of(o));
    res.push_back(values_of(flat));
    return res;
  });
  V flat_want;
  for (int i = 0; i < world; ++i)
    flat_want.insert(flat_want.end(), {double(i), double(i)});
  for (const auto& g : got) {
    for (int i = 0; i < world; ++i)
      CHECK(g[size_t(i)] == V{double(i), double(i)});
    CHECK(g.back() == flat_want);
  }
}

TEST_CASE("gather collects on the root, scatter hands out from it", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  auto got = on_ranks<std::vector<V>>(world, [&](int r, process_group_gloo& pg) {
    std::vector<V> res;
    std::vector<tensor> outs;
    if (r == 0)
      for (int i = 0; i < world; ++i)
        outs.push_back(empty({3}, {.dtype = dtype::int32}));
    pg.gather(outs, full({3}, r + 5, {.dtype = dtype::int32}), 0).wait();
    for (auto& o : outs)
      res.push_back(values_of(o));
    std::vector<tensor> ins;
    if (r == 0)
      for (int i = 0; i < world; ++i)
        ins.push_back(full({3}, 100 + i, {.dtype = dtype::int32}));
    tensor out = zeros({3}, {.dtype = dtype::int32});
    pg.scatter(out, ins, 0).wait();
    res.push_back(values_of(out));
    return res;
  });
  for (int i = 0; i < world; ++i)
    CHECK(got[0][size_t(i)] == V(3, i + 5));
  for (int r = 0; r < world; ++r)
    CHECK(got[size_t(r)].back() == V(3, 100 + r));
}

TEST_CASE("reduce_scatter reduces and keeps each rank's part", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  auto opts = actorch::test::short_timeout();
  opts.shared_memory = GENERATE(true, false);
  auto got = on_ranks<V>(
      world,
      [&](int r, process_group_gloo& pg) {
        std::vector<tensor> ins;
        for (int j = 0; j < world; ++j)
          ins.push_back(full({2}, double(10 * r + j)));
        tensor out = empty({2});
        pg.reduce_scatter(out, ins, reduce_op::sum).wait();
        return values_of(out);
      },
      opts);
  for (int r = 0; r < world; ++r) {
    double s = 0;
    for (int q = 0; q < world; ++q)
      s += 10 * q + r;
    CHECK(got[size_t(r)] == V(2, s));
  }
}

TEST_CASE("all_to_all sends inputs[j] to rank j", "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  auto got = on_ranks<std::vector<V>>(world, [&](int r, process_group_gloo& pg) {
    std::vector<tensor> ins, outs;
    for (int j = 0; j < world; ++j) {
      ins.push_back(full({2}, double(10 * r + j)));
      outs.push_back(empty({2}));
    }
    pg.all_to_all(outs, ins).wait();
    std::vector<V> res;
    for (auto& o : outs)
      res.push_back(values_of(o));
    return res;
  });
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < world; ++i)
      CHECK(got[size_t(r)][size_t(i)] == V(2, 10 * i + r));
}

TEST_CASE("all_to_all over the chunks of one tensor, apart and in place over the inputs",
          "[comm][gloo]") {
  // Chunks back to back (all_to_all_single's) go to Gloo where they lie; outputs over the inputs
  // must still read every input before it is overwritten.
  const int world = GENERATE(2, 3);
  for (const bool same : {false, true}) {
    INFO("outputs over the inputs: " << same);
    auto got = on_ranks<V>(world, [&](int r, process_group_gloo& pg) {
      tensor x = empty({2 * world}), y = same ? x : empty({2 * world});
      std::vector<tensor> ins, outs;
      for (int j = 0; j < world; ++j) {
        ins.push_back(x.narrow(0, 2 * j, 2).fill_(double(10 * r + j)));
        outs.push_back(y.narrow(0, 2 * j, 2));
      }
      pg.all_to_all(outs, ins).wait();
      return values_of(y);
    });
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < world; ++i) {
        CHECK(got[size_t(r)][size_t(2 * i)] == 10 * i + r);
        CHECK(got[size_t(r)][size_t(2 * i + 1)] == 10 * i + r);
      }
  }
}

TEST_CASE("barrier and monitored_barrier pass when every rank arrives", "[comm][gloo]") {
  auto got = on_ranks<int>(3, [](int, process_group_gloo& pg) {
    pg.barrier().wait();
    pg.monitored_barrier(std::chrono::milliseconds(2000), false).wait();
    pg.monitored_barrier(std::chrono::milliseconds(2000), true).wait();
    return 1;
  });
  CHECK(got == std::vector<int>{1, 1, 1});
}

TEST_CASE("all_reduce of tensors larger than a shared-memory chunk", "[comm][gloo]") {
  // 1.5M float64 = 12 MB: three 4 MiB chunks and a remainder, split unevenly over 3 ranks.
  const int64_t n = 1500001;
  auto opts = actorch::test::short_timeout(10000);
  opts.shared_memory = GENERATE(true, false);
  auto got = on_ranks<V>(
      3,
      [&](int r, process_group_gloo& pg) {
        tensor t = arange(n, {.dtype = dtype::float64}).mul(double(r + 1));
        pg.all_reduce(t, reduce_op::sum).wait();
        const V v = values_of(t);
        return V{v[0], v[1], v[size_t(n / 2)], v[size_t(n - 1)], double(v.size())};
      },
      opts);
  for (const auto& g : got)
    CHECK(g == V{0, 6, 6.0 * double(n / 2), 6.0 * double(n - 1), double(n)});
}

TEST_CASE("back-to-back small and large all_reduces keep their values apart", "[comm][gloo]") {
  // Issued without waiting, alternating sizes below and above the shared-memory small-op limit,
  // so buffers of consecutive ops are reused while peers may still be reading the last ones.
  auto got = on_ranks<V>(3, [](int r, process_group_gloo& pg) {
    std::vector<tensor> ts;
    std::vector<work> ws;
    for (int k = 0; k < 8; ++k) {
      const int64_t n = k % 2 == 0 ? 3 : 300000; // 12 bytes or 1.2 MB of float32
      ts.push_back(full({n}, double(10 * k + r)));
      ws.push_back(pg.all_reduce(ts.back(), reduce_op::sum));
    }
    when_all(ws).wait();
    V out;
    for (auto& t : ts) {
      const V v = values_of(t);
      out.push_back(v.front());
      out.push_back(v.back());
    }
    return out;
  });
  V want;
  for (int k = 0; k < 8; ++k)
    want.insert(want.end(), {30.0 * k + 3, 30.0 * k + 3}); // sum over r of 10k + r
  for (const auto& g : got)
    CHECK(g == want);
}

TEST_CASE("all_to_all with a different size for each pair of ranks", "[comm][gloo]") {
  // Rank r sends j + r + 1 elements of value 100 r + j to rank j.
  auto got = on_ranks<std::vector<V>>(3, [](int r, process_group_gloo& pg) {
    std::vector<tensor> ins, outs;
    for (int j = 0; j < 3; ++j) {
      ins.push_back(full({j + r + 1}, double(100 * r + j)));
      outs.push_back(empty({r + j + 1}));
    }
    pg.all_to_all(outs, ins).wait();
    std::vector<V> res;
    for (auto& o : outs)
      res.push_back(values_of(o));
    return res;
  });
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 3; ++i)
      CHECK(got[size_t(r)][size_t(i)] == V(size_t(r + i + 1), 100.0 * i + r));
}

TEST_CASE("all_reduce of shared memory (empty_shared) reduces in place on every rank without "
          "copies",
          "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  const auto op = GENERATE(reduce_op::sum, reduce_op::avg, reduce_op::max);
  INFO("world " << world << " op " << reduce_op_name(op));
  const int64_t n = 300000; // 1.2 MB of float32: above the small-op path, several chunks
  struct seen {
    bool shared = false, small_refused = false, tcp_refused = false;
    V values;
  };
  auto got = on_ranks<seen>(world, [&](int r, process_group_gloo& pg) {
    seen s;
    s.small_refused = !pg.empty_shared(16, dtype::float32).defined();
    tensor t = pg.empty_shared(n, dtype::float32);
    s.shared = t.defined() && t.numel() == n && values_of(t.narrow(0, 0, 4)) == V(4, 0.0);
    auto fill = [&] { // rank r holds r + 1 + i % 7 at element i
      float* p = t.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i)
        p[i] = float(r + 1 + i % 7);
    };
    for (int k = 0; k < 2; ++k) { // the block serves op after op
      fill();
      pg.all_reduce(t, op).wait();
    }
    s.values = values_of(t.narrow(0, n - 8, 8));
    return s;
  });
  for (int r = 0; r < world; ++r) {
    const seen& s = got[size_t(r)];
    REQUIRE(s.small_refused);
    REQUIRE(s.shared);
    V want;
    for (int64_t i = n - 8; i < n; ++i) {
      const double base = double(i % 7);
      double sum = 0, max = 0;
      for (int q = 0; q < world; ++q) {
        sum += base + q + 1;
        max = std::max(max, base + q + 1);
      }
      want.push_back(op == reduce_op::sum ? sum : op == reduce_op::avg ? sum / world : max);
    }
    CHECK(actorch::test::close(s.values, want));
  }
}

TEST_CASE("shared memory needs every rank on one host, and ranks passing ordinary memory where the "
          "others pass a shared block all-reduce through the segment's slots, as Join's shadow "
          "all-reduces of DDP's buckets do",
          "[comm][gloo]") {
  auto opts = actorch::test::short_timeout();
  opts.shared_memory = false; // as if the ranks were on several hosts
  auto none = on_ranks<int>(  // not bool: std::vector<bool> packs bits that threads would share
      2,
      [](int, process_group_gloo& pg) {
        const bool shared = pg.empty_shared(1 << 20, dtype::float32).defined();
        // Both ranks finish connecting before either tears its group down: a rank that
        // returned at once could close its pair while Gloo on the other still reads it.
        pg.barrier().wait();
        return int(shared);
      },
      opts);
  REQUIRE(none == std::vector<int>{0, 0});
  // World 3: ranks 0 and 1 pass shared blocks (of the same one, then of different ones), rank 2
  // ordinary memory; then every rank passes its block, which runs in place again.
  const int64_t n = 1 << 18;
  auto got = on_ranks<V>(3, [&](int r, process_group_gloo& pg) {
    tensor a = pg.empty_shared(n, dtype::float32);
    tensor b = pg.empty_shared(n, dtype::float32);
    V out;
    const tensor passes[3][3] = {{a, a, zeros({n})}, {a, b, zeros({n})}, {a, a, a}};
    for (const auto& ranks : passes) {
      tensor t = ranks[r];
      t.fill_(double(r + 1));
      pg.all_reduce(t, reduce_op::sum).wait();
      out.push_back(t.select(0, 0).item<double>());
      out.push_back(t.select(0, n - 1).item<double>());
    }
    return out;
  });
  for (int r = 0; r < 3; ++r)
    CHECK(got[size_t(r)] == V(6, 6.0));
}

TEST_CASE("empty_symmetric: every rank's buffer mapped on every rank at any size, its barrier "
          "ordering their writes and reads, none without shared memory, and a rank that does not "
          "come named",
          "[comm][gloo]") {
  const int world = GENERATE(2, 3);
  const int64_t n = GENERATE(int64_t(3), int64_t(100000));
  INFO("world " << world << ", " << n << " floats");
  // Each round every rank writes round * 10 + its rank into its buffer and, after the barrier,
  // reads every rank's; a second barrier lets the next round overwrite.
  auto sums = on_ranks<std::vector<double>>(world, [&](int r, process_group_gloo& pg) {
    auto m = pg.empty_symmetric(n, dtype::float32);
    std::vector<double> out;
    if (m == nullptr) // not REQUIRE: Catch's assertions are not for the rank threads
      return out;
    for (int round = 0; round < 3; ++round) {
      m->buffer(r).fill_(double(round * 10 + r));
      m->barrier();
      double sum = 0;
      for (int q = 0; q < world; ++q)
        sum +=
            m->buffer(q).select(0, n - 1).item<double>() + m->buffer(q).select(0, 0).item<double>();
      out.push_back(sum);
      m->barrier();
    }
    return out;
  });
  for (int r = 0; r < world; ++r)
    for (int round = 0; round < 3; ++round) {
      REQUIRE(sums[size_t(r)].size() == 3u);
      double want = 0;
      for (int q = 0; q < world; ++q)
        want += 2.0 * (round * 10 + q);
      CHECK(sums[size_t(r)][size_t(round)] == want);
    }
  auto opts = actorch::test::short_timeout();
  opts.shared_memory = false;
  auto none = on_ranks<int>(
      2,
      [](int, process_group_gloo& pg) {
        const bool mapped = pg.empty_symmetric(16, dtype::float32) != nullptr;
        pg.barrier().wait();
        return int(mapped);
      },
      opts);
  CHECK(none == std::vector<int>{0, 0});
  auto errors = on_ranks<std::string>(
      2,
      [](int r, process_group_gloo& pg) {
        auto m = pg.empty_symmetric(16, dtype::float32);
        return r == 0 ? error_of([&] { m->barrier(); }) : std::string();
      },
      actorch::test::short_timeout(500));
  CHECK_THAT(errors[0],
             Contains("rank 1 did not arrive in the barrier over shared memory within 500 ms"));
}
