// The *_multigpu collectives with several CPU tensors per process (what a machine without GPUs
// passes): every (process, tensor) pair takes part as torch 1.13's do, worked out by hand for
// a world of 3 processes of 2 tensors each, tensor j of rank r holding 10 * r + j + 1.
#include <catch2/catch.hpp>

#include "comm/multigpu.hpp"
#include "core/core.hpp"
#include "tests/comm/ranks.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::dist;
using namespace actorch::test;
using Catch::Contains;

namespace {

constexpr int kWorld = 3;

// Two 2-element tensors for rank r: tensor j holds 10 * r + j + 1 in both elements.
std::vector<tensor> inputs_of(int r) {
  return {full({2}, 10.0 * r + 1), full({2}, 10.0 * r + 2)};
}

std::vector<std::vector<double>> values_of_list(const std::vector<tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const tensor& t : ts)
    out.push_back(values_of(t));
  return out;
}

} // namespace

TEST_CASE("all_reduce_multigpu reduces every tensor of every process into each") {
  // Sum over r, j of 10 r + j + 1: 6 values, 10 * (0+0+1+1+2+2) + (1+2) * 3 = 69.
  for (const auto& [op, want] : {std::pair{reduce_op::sum, 69.0}, std::pair{reduce_op::avg, 11.5},
                                 std::pair{reduce_op::max, 22.0}, std::pair{reduce_op::min, 1.0},
                                 std::pair{reduce_op::product, 1.0 * 2 * 11 * 12 * 21 * 22}}) {
    INFO(reduce_op_name(op));
    const auto got = on_ranks<std::vector<std::vector<double>>>(
        kWorld, [op = op](int r, process_group_gloo& pg) {
          auto ts = inputs_of(r);
          all_reduce_multigpu(ts, op, unowned(pg));
          return values_of_list(ts);
        });
    for (const auto& rank : got)
      for (const auto& t : rank)
        CHECK(t == std::vector<double>{want, want});
  }
}

TEST_CASE("broadcast_multigpu and reduce_multigpu use src_tensor and dst_tensor of one rank") {
  const auto got =
      on_ranks<std::vector<std::vector<double>>>(kWorld, [](int r, process_group_gloo& pg) {
        auto b = inputs_of(r);
        broadcast_multigpu(b, 1, unowned(pg), false, 1); // rank 1's tensor 1: 12
        auto s = inputs_of(r);
        work w =
            reduce_multigpu(s, 2, reduce_op::sum, unowned(pg), true, 0); // into rank 2's tensor 0
        w.wait();
        auto out = values_of_list(b);
        for (const auto& v : values_of_list(s))
          out.push_back(v);
        return out;
      });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(got[r][0] == std::vector<double>{12, 12});
    CHECK(got[r][1] == std::vector<double>{12, 12});
    // Only rank 2's tensor 0 receives the sum; the others keep their values.
    const double first = r == 2 ? 69 : 10 * r + 1;
    CHECK(got[r][2] == std::vector<double>{first, first});
    CHECK(got[r][3] == std::vector<double>{10.0 * r + 2, 10.0 * r + 2});
  }
}

TEST_CASE("all_gather_multigpu gives every device every process's every tensor") {
  const auto got =
      on_ranks<std::vector<std::vector<double>>>(kWorld, [](int r, process_group_gloo& pg) {
        const auto in = inputs_of(r);
        std::vector<std::vector<tensor>> outs(2);
        for (auto& o : outs)
          for (int k = 0; k < 2 * kWorld; ++k)
            o.push_back(zeros({2}));
        all_gather_multigpu(outs, in, unowned(pg));
        std::vector<std::vector<double>> flat;
        for (const auto& o : outs)
          for (const auto& v : values_of_list(o))
            flat.push_back(v);
        return flat;
      });
  for (const auto& rank : got) {
    REQUIRE(rank.size() == 2 * 2 * kWorld);
    for (size_t i = 0; i < rank.size(); ++i) {
      const size_t at = i % (2 * kWorld), k = at / 2, j = at % 2; // position k * n + j
      CHECK(rank[i] == std::vector<double>(2, 10.0 * double(k) + double(j) + 1));
    }
  }
}

TEST_CASE("reduce_scatter_multigpu gives output j of rank k the reduction of position k n + j") {
  const auto got =
      on_ranks<std::vector<std::vector<double>>>(kWorld, [](int r, process_group_gloo& pg) {
        // Input list i of rank r holds, at position p, 100 r + 10 i + p.
        std::vector<std::vector<tensor>> ins(2);
        for (int i = 0; i < 2; ++i)
          for (int p = 0; p < 2 * kWorld; ++p)
            ins[size_t(i)].push_back(full({2}, 100.0 * r + 10 * i + p));
        std::vector<tensor> outs{zeros({2}), zeros({2})};
        reduce_scatter_multigpu(outs, ins, reduce_op::sum, unowned(pg));
        return values_of_list(outs);
      });
  for (int k = 0; k < kWorld; ++k)
    for (int j = 0; j < 2; ++j) {
      // Sum over r in 0..2 and i in 0..1 of 100 r + 10 i + (2k + j) = 600 + 30 + 6 (2k + j).
      const double want = 600 + 30 + 6.0 * (2 * k + j);
      CHECK(got[k][j] == std::vector<double>{want, want});
    }
}

TEST_CASE("the *_multigpu collectives name what is wrong with their lists") {
  const auto errors = on_ranks<std::vector<std::string>>(1, [](int, process_group_gloo& pg) {
    std::vector<tensor> empty, mixed{zeros({2}), zeros({3})};
    std::vector<tensor> ok = inputs_of(0);
    std::vector<std::vector<tensor>> outs(2, std::vector<tensor>(1, zeros({2})));
    return std::vector<std::string>{
        error_of([&] { all_reduce_multigpu(empty, reduce_op::sum, unowned(pg)); }),
        error_of([&] { all_reduce_multigpu(mixed, reduce_op::sum, unowned(pg)); }),
        error_of([&] { all_reduce_multigpu(ok, reduce_op::band, unowned(pg)); }),
        error_of([&] { broadcast_multigpu(ok, 0, unowned(pg), false, 2); }),
        error_of([&] { all_gather_multigpu(outs, ok, unowned(pg)); }),
    };
  });
  const auto& e = errors[0];
  CHECK_THAT(e[0], Contains("all_reduce_multigpu: tensor_list is empty"));
  CHECK_THAT(e[1], Contains("tensor_list[1] is float32 of shape [3]") &&
                       Contains("the same shape and dtype"));
  CHECK_THAT(e[2], Contains("BAND is not supported"));
  CHECK_THAT(e[3], Contains("src_tensor 2 is out of range for a list of 2"));
  CHECK_THAT(e[4], Contains("world size times the number of inputs (2) tensors, but one holds 1"));
}
