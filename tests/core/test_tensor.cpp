// Tensor metadata, views and copies: shapes, strides and offsets checked by hand, and that
// views alias their base while copies do not.
#include <catch2/catch.hpp>

#include "core/ops/elementwise.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;
using Catch::Contains;

TEST_CASE("a new tensor is contiguous with row-major strides", "[core][tensor]") {
  tensor t = zeros({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.sizes() == shape_t{2, 3, 4});
  CHECK(t.strides() == shape_t{12, 4, 1});
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 96);
  CHECK(t.is_contiguous());
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(-3) == 12);
  CHECK(t.dtype() == dtype::float32);
  CHECK(t.device() == kCPU);
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlignment == 0);
}

TEST_CASE("view and reshape share storage when the layout allows", "[core][tensor]") {
  tensor a = arange(12);
  tensor v = a.view({3, -1});
  CHECK(v.sizes() == shape_t{3, 4});
  CHECK(v.storage() == a.storage());
  v.select(0, 1).fill_(0);
  CHECK(ints_of(a) == std::vector<int64_t>{0, 1, 2, 3, 0, 0, 0, 0, 8, 9, 10, 11});

  SECTION("a transposed tensor cannot be viewed flat, but reshape copies") {
    tensor t = arange(6).view({2, 3}).t();
    REQUIRE_THROWS_WITH(t.view({6}), Contains("view: shape [6] is not compatible") &&
                                         Contains("use reshape instead"));
    tensor r = t.reshape({6});
    CHECK(r.storage() != t.storage());
    CHECK(ints_of(r) == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  }
  SECTION("splitting a dim of a sliced tensor keeps the view") {
    tensor s = arange(24).view({4, 6}).slice(1, 0, 4); // [4, 4], strides [6, 1]
    tensor w = s.view({4, 2, 2});
    CHECK(w.storage() == s.storage());
    CHECK(w.strides() == shape_t{6, 2, 1});
  }
  SECTION("a 0-dim tensor views as [1] and back") {
    tensor s0 = scalar_tensor(5);
    CHECK(s0.view({1}).sizes() == shape_t{1});
    CHECK(s0.view({1, 1}).strides() == shape_t{1, 1});
    CHECK(s0.view({1}).view({}).dim() == 0);
  }
  SECTION("bad shapes name what is wrong") {
    REQUIRE_THROWS_WITH(a.view({5, -1}), Contains("shape [5, -1] is invalid for input of size 12"));
    REQUIRE_THROWS_WITH(a.view({-1, -1}), Contains("only one dim can be -1"));
    REQUIRE_THROWS_WITH(a.reshape({5}), Contains("reshape: shape [5] is invalid"));
  }
}

TEST_CASE("transpose, permute and t swap sizes and strides", "[core][tensor]") {
  tensor a = arange(24).view({2, 3, 4});
  tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == shape_t{4, 2, 3});
  CHECK(p.strides() == shape_t{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  CHECK(p.contiguous().is_contiguous());
  // p[i][j][k] = a[j][k][i] = 12 j + 4 k + i
  CHECK(p[3][1][2].item<int64_t>() == 12 + 8 + 3);
  CHECK(a.transpose(-1, 0).sizes() == shape_t{4, 3, 2});
  REQUIRE_THROWS_WITH(a.permute({0, 0, 1}), Contains("permute: dim 0 repeats"));
  REQUIRE_THROWS_WITH(a.permute({0, 1}), Contains("permute: got 2 dims"));
  REQUIRE_THROWS_WITH(a.t(), Contains("t: expects a tensor with <= 2 dims but got 3"));
  REQUIRE_THROWS_WITH(a.transpose(0, 3),
                      Contains("dim 3 is out of range for a tensor with 3 dims"));
}

TEST_CASE("narrow, select and slice address the right elements", "[core][tensor]") {
  tensor a = arange(20).view({4, 5});
  CHECK(ints_of(a.narrow(1, 1, 2)) == std::vector<int64_t>{1, 2, 6, 7, 11, 12, 16, 17});
  CHECK(ints_of(a.select(1, -1)) == std::vector<int64_t>{4, 9, 14, 19});
  CHECK(a.select(0, 2).storage_offset() == 10);
  CHECK(ints_of(a.slice(1, 0, 5, 2)[1]) == std::vector<int64_t>{5, 7, 9});
  CHECK(ints_of(a.slice(0, -2, 100)) ==
        std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  CHECK(a.slice(0, 3, 1).sizes() == shape_t{0, 5});
  REQUIRE_THROWS_WITH(a.select(0, 4),
                      Contains("select: index 4 is out of range for dim 0 of size 4"));
  REQUIRE_THROWS_WITH(a.narrow(1, 3, 3), Contains("narrow: start 3 and length 3 are out of range"));
  REQUIRE_THROWS_WITH(a.slice(0, 0, 2, 0), Contains("slice: step must be positive"));
  REQUIRE_THROWS_WITH(scalar_tensor(1).select(0, 0), Contains("cannot select from a 0-dim tensor"));
}

TEST_CASE("squeeze, unsqueeze and expand", "[core][tensor]") {
  tensor a = zeros({1, 3, 1});
  CHECK(a.squeeze().sizes() == shape_t{3});
  CHECK(a.squeeze(0).sizes() == shape_t{3, 1});
  CHECK(a.squeeze(1).sizes() == shape_t{1, 3, 1});
  CHECK(a.unsqueeze(-1).sizes() == shape_t{1, 3, 1, 1});
  CHECK(scalar_tensor(2.0).unsqueeze(0).sizes() == shape_t{1});

  tensor col = arange(3).view({3, 1});
  tensor e = col.expand({2, 3, 4});
  CHECK(e.sizes() == shape_t{2, 3, 4});
  CHECK(e.strides() == shape_t{0, 1, 0});
  CHECK(ints_of(e[1][2]) == std::vector<int64_t>{2, 2, 2, 2});
  CHECK(col.expand({-1, 2}).sizes() == shape_t{3, 2});
  REQUIRE_THROWS_WITH(col.expand({4, 4}),
                      Contains("expanded size 4 must match the existing size 3"));
  REQUIRE_THROWS_WITH(e.fill_(1), Contains("cannot write in place to a tensor with broadcast"));
}

TEST_CASE("chunk and split return views covering the dim", "[core][tensor]") {
  tensor a = arange(10);
  auto c = a.chunk(3);
  REQUIRE(c.size() == 3);
  CHECK(c[0].numel() == 4);
  CHECK(c[2].numel() == 2);
  CHECK(c[2].storage() == a.storage());
  auto s = a.split(shape_t{2, 8});
  CHECK(ints_of(s[0]) == std::vector<int64_t>{0, 1});
  CHECK(a.split(4).size() == 3);
  REQUIRE_THROWS_WITH(a.split(shape_t{2, 3}),
                      Contains("split_sizes [2, 3] sum to 5 but dim 0 has size 10"));
  REQUIRE_THROWS_WITH(a.chunk(0), Contains("chunks must be positive"));
}

TEST_CASE("copy_ broadcasts and converts, clone and to copy", "[core][tensor]") {
  tensor dst = zeros({2, 3}, {.dtype = dtype::int32});
  dst.copy_(tensor_of({1.9, -2.7, 3.0}));
  CHECK(ints_of(dst) == std::vector<int64_t>{1, -2, 3, 1, -2, 3}); // truncation toward zero
  tensor c = dst.clone();
  c.fill_(7);
  CHECK(dst[0][0].item<int>() == 1);
  CHECK(dst.to(dtype::int32).is_same(dst));
  CHECK_FALSE(dst.to(dtype::int32, true).is_same(dst));
  CHECK(tensor_of({0.0, 0.5}).to(dtype::bool_).str() == "tensor([False,  True])");
  REQUIRE_THROWS_WITH(dst.copy_(zeros({4})),
                      Contains("copy_: shapes [2, 3] and [4] cannot be broadcast"));
  REQUIRE_THROWS_WITH(dst.to(device("cuda:64")),
                      Contains("empty: cannot create a tensor on cuda:64"));

  SECTION("copy between overlapping views of one storage reads the old values") {
    tensor a = arange(6);
    a.slice(0, 1, 6).copy_(a.slice(0, 0, 5)); // a shifted right by one
    CHECK(ints_of(a) == std::vector<int64_t>{0, 0, 1, 2, 3, 4});
  }
  SECTION("a transposed copy into itself") {
    tensor m = arange(4).view({2, 2});
    m.copy_(m.t());
    CHECK(ints_of(m) == std::vector<int64_t>{0, 2, 1, 3});
  }
}

TEST_CASE("item reads one element and rejects more", "[core][tensor]") {
  CHECK(tensor_of({2.5}).item<double>() == 2.5);
  CHECK(arange(5)[3].item<int64_t>() == 3);
  REQUIRE_THROWS_WITH(arange(5).item<int>(),
                      Contains("item: a tensor with 5 elements cannot be converted"));
  REQUIRE_THROWS_WITH(arange(5).data_ptr<float>(),
                      Contains("data_ptr: tensor has dtype int64 but float32 was requested"));
  REQUIRE_THROWS_WITH(tensor().numel(), Contains("undefined"));
}

TEST_CASE("numel overflow and negative sizes are errors", "[core][tensor]") {
  REQUIRE_THROWS_WITH(empty({1 << 30, 1 << 30, 1 << 30}), Contains("numel overflow"));
  REQUIRE_THROWS_WITH(empty({int64_t(1) << 61}), Contains("needs more bytes than int64 counts"));
  REQUIRE_THROWS_WITH(zeros({2, -1}), Contains("sizes must be non-negative but got [2, -1]"));
}

TEST_CASE("from_blob wraps memory without copying", "[core][tensor]") {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  bool freed = false;
  {
    tensor t = from_blob(data.data(), {2, 3}, dtype::float32, [&](void*) { freed = true; });
    t[1][2].fill_(60);
    CHECK(data[5] == 60);
    tensor col = from_blob(data.data(), {2}, dtype::float32, {}, {3});
    CHECK(col[1].item<float>() == 4);
  }
  CHECK(freed);
  REQUIRE_THROWS_WITH(from_blob(reinterpret_cast<char*>(data.data()) + 1, {2}, dtype::float32),
                      Contains("is not aligned to the 4-byte size of float32"));
}

TEST_CASE("as_strided rejects views outside the storage", "[core][tensor]") {
  tensor a = zeros({6});
  CHECK(a.as_strided({2, 2}, {3, 1}, 1).sizes() == shape_t{2, 2});
  REQUIRE_THROWS_WITH(a.as_strided({2, 2}, {3, 1}, 3),
                      Contains("reach element 7 but the storage holds 6"));
}

TEST_CASE("devices parse PyTorch's spellings", "[core][tensor]") {
  CHECK(device("cpu").is_cpu());
  CHECK(device("cuda:1").index == 1);
  CHECK(device("cuda").is_cuda());
  CHECK(device("cuda:3").str() == "cuda:3");
  REQUIRE_THROWS_WITH(device("gpu"), Contains("but got \"gpu\""));
  REQUIRE_THROWS_WITH(device("cuda:x"), Contains("but got \"cuda:x\""));
}
