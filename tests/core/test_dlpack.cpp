// DLPack export and import (core/dlpack.hpp): zero-copy both ways, strides and offsets kept,
// the deleter called once when the last view is gone, and clear errors for what DLPack 0.6 or
// actorch cannot express. The round trips with numpy and PyTorch are in tests/python.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>

#include "core/dlpack.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using Catch::Contains;

namespace {

/// A tensor over memory whose release is counted.
tensor counted(const shape_t& shape, std::shared_ptr<std::atomic<int>> released) {
  auto* data = new float[12];
  for (int i = 0; i < 12; ++i)
    data[i] = float(i);
  return from_blob(data, shape, dtype::float32, [released](void* p) {
    delete[] static_cast<float*>(p);
    released->fetch_add(1);
  });
}

} // namespace

TEST_CASE("to_dlpack shares the tensor's memory with its strides and offset", "[core][dlpack]") {
  auto released = std::make_shared<std::atomic<int>>(0);
  tensor base = counted({3, 4}, released);
  tensor view = base.t().narrow(0, 1, 2); // [2, 3] of strides [1, 4], offset 1
  DLManagedTensor* m = to_dlpack(view);
  base = tensor();
  const DLTensor& dl = m->dl_tensor;
  CHECK(dl.device.device_type == kDLCPU);
  CHECK(dl.ndim == 2);
  CHECK(dl.shape[0] == 2);
  CHECK(dl.shape[1] == 3);
  CHECK(dl.strides[0] == 1);
  CHECK(dl.strides[1] == 4);
  // The view's first element, as PyTorch and numpy export: torch's import ignores byte_offset.
  CHECK(dl.byte_offset == 0);
  CHECK(dl.dtype.code == kDLFloat);
  CHECK(dl.dtype.bits == 32);
  CHECK(dl.dtype.lanes == 1);
  CHECK(dl.data == static_cast<char*>(view.storage()->data()) + 4);
  CHECK(released->load() == 0);

  // Back through from_dlpack: the same memory, the same view, one release at the very end.
  tensor back = from_dlpack(m);
  CHECK(back.sizes() == shape_t{2, 3});
  CHECK(back.strides() == shape_t{1, 4});
  CHECK(test::values_of(back) == test::values_of(view));
  CHECK(back.data_ptr() == view.data_ptr());
  back.fill_(-1); // writes through to the producer's memory
  CHECK(test::values_of(view) == std::vector<double>(6, -1));
  tensor row = back.select(0, 0); // a view of the import keeps it alive too
  back = tensor();
  CHECK(released->load() == 0);
  view = tensor(); // the producer's last view: the import still holds the memory
  CHECK(released->load() == 0);
  CHECK(test::values_of(row) == std::vector<double>(3, -1));
  row = tensor(); // the last view of all: the producer is told, once
  CHECK(released->load() == 1);
}

TEST_CASE("to_dlpack's deleter releases the tensor's memory exactly when the consumer says",
          "[core][dlpack]") {
  auto released = std::make_shared<std::atomic<int>>(0);
  DLManagedTensor* m = to_dlpack(counted({12}, released));
  CHECK(released->load() == 0); // the producer's handle is gone: the DLPack one holds it
  m->deleter(m);
  CHECK(released->load() == 1);
}

TEST_CASE("every dtype DLPack 0.6 has goes both ways, and the others are clear errors",
          "[core][dlpack]") {
  for (dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int8,
                   dtype::uint8, dtype::int32, dtype::int64}) {
    INFO(dtype_name(dt));
    const tensor t = arange(6).to(dt).view({2, 3});
    const tensor back = from_dlpack(to_dlpack(t));
    CHECK(back.dtype() == dt);
    CHECK(test::values_of(back) == test::values_of(t));
  }
  const tensor scalar = scalar_tensor(2.5, {.dtype = dtype::float64});
  CHECK(from_dlpack(to_dlpack(scalar)).item<double>() == 2.5); // 0-dim
  CHECK(from_dlpack(to_dlpack(empty({0, 3}))).sizes() == shape_t{0, 3});
  CHECK_THROWS_WITH(to_dlpack(full({2}, true)),
                    Contains("to_dlpack: bool cannot be expressed in DLPack 0.6"));
  CHECK_THROWS_WITH(to_dlpack(tensor()), Contains("to_dlpack: an undefined tensor"));

  // A producer's tensor actorch cannot take: refused, and left to its owner.
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  int deleted = 0;
  DLManagedTensor m{};
  m.dl_tensor.data = data;
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.dtype = {kDLComplex, 64, 1};
  m.manager_ctx = &deleted;
  m.deleter = [](DLManagedTensor* self) { ++*static_cast<int*>(self->manager_ctx); };
  CHECK_THROWS_WITH(from_dlpack(&m), Contains("from_dlpack: dtype complex64 has no actorch dtype"));
  m.dl_tensor.dtype = {kDLFloat, 32, 4};
  CHECK_THROWS_WITH(from_dlpack(&m), Contains("dtype float32x4 has no actorch dtype"));
  m.dl_tensor.dtype = {kDLFloat, 32, 1};
  m.dl_tensor.device = {kDLOpenCL, 0};
  CHECK_THROWS_WITH(from_dlpack(&m), Contains("memory of DLPack device type 4"));
  m.dl_tensor.device = {kDLCPU, 0};
  int64_t backwards[1] = {-1};
  m.dl_tensor.strides = backwards;
  CHECK_THROWS_WITH(from_dlpack(&m), Contains("negative stride -1 in dim 0"));
  m.dl_tensor.strides = nullptr; // null strides: compact, row-major
  m.dl_tensor.byte_offset = 2;
  CHECK_THROWS_WITH(from_dlpack(&m), Contains("is not aligned to its 4-byte float32 elements"));
  CHECK(deleted == 0);
  m.dl_tensor.byte_offset = 4;
  shape[0] = 3;
  {
    const tensor t = from_dlpack(&m);
    CHECK(test::values_of(t) == std::vector<double>{2, 3, 4});
    CHECK(t.is_contiguous());
  }
  CHECK(deleted == 1);
}
