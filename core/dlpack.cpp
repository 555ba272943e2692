// DLPack export and import (dlpack.hpp).
//
// Note [DLPack]
// ~~~~~~~~~~~~~
// Export: the DLManagedTensor's manager_ctx holds a copy of the tensor handle (so the storage,
// shared by every view, lives on) and the shape and strides arrays the DLTensor points into;
// its deleter frees that context, dropping the handle. DLTensor.data is the view's first
// element and byte_offset 0, as PyTorch and numpy export them: PyTorch's import (1.13's at
// least) ignores byte_offset, so a view exported as its storage's base and an offset came back
// as the storage's first elements. Strides are in elements, as DLPack counts them.
// Import (through from_blob): the tensor's storage wraps the memory from data + byte_offset up to
// the furthest element any index reaches (an empty tensor wraps none), with the managed tensor's
// deleter as its deleter: the last view gone, the producer is told. A stride of 0 (broadcast) is
// kept; a negative one is refused, as actorch's views never step backwards (nor do PyTorch's).
// DLPack 0.6 has no bool type (kDLBool came in 0.8): bool tensors are refused both ways,
// rather than passed as uint8, which a consumer would read as numbers.
#include "core/dlpack.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/factory.hpp"

namespace actorch {

namespace {

struct dtype_code {
  dtype dt;
  uint8_t code;
  uint8_t bits;
};
constexpr dtype_code kCodes[] = {
    {dtype::float32, kDLFloat, 32}, {dtype::float64, kDLFloat, 64},
    {dtype::float16, kDLFloat, 16}, {dtype::bfloat16, kDLBfloat, 16},
    {dtype::int8, kDLInt, 8},       {dtype::uint8, kDLUInt, 8},
    {dtype::int32, kDLInt, 32},     {dtype::int64, kDLInt, 64},
    {dtype::int16, kDLInt, 16},
};

std::string dl_type_str(const DLDataType& t) {
  static constexpr const char* kNames[] = {"int",           "uint",   "float",
                                           "opaque handle", "bfloat", "complex"};
  const std::string name = t.code < 6 ? kNames[t.code] : "code " + std::to_string(int(t.code));
  return name + std::to_string(int(t.bits)) + (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
}

std::optional<dtype> dtype_of(const DLDataType& t) {
  if (t.lanes != 1)
    return std::nullopt;
  for (const dtype_code& c : kCodes)
    if (c.code == t.code && c.bits == t.bits)
      return c.dt;
  return std::nullopt;
}

struct export_context {
  tensor t;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

void delete_export(DLManagedTensor* m) {
  delete static_cast<export_context*>(m->manager_ctx);
}

} // namespace

DLManagedTensor* to_dlpack(const tensor& t) {
  ACTORCH_CHECK(t.defined(), "to_dlpack: an undefined tensor");
  const auto* code = std::find_if(std::begin(kCodes), std::end(kCodes),
                                  [&](const dtype_code& c) { return c.dt == t.dtype(); });
  ACTORCH_CHECK(code != std::end(kCodes), "to_dlpack: ", dtype_name(t.dtype()),
                " cannot be expressed in DLPack 0.6 (it has no bool type; convert with "
                ".to(dtype::uint8) and back)");
  auto ctx = std::make_unique<export_context>();
  ctx->t = t;
  ctx->shape = t.sizes();
  ctx->strides = t.strides();
  DLTensor& dl = ctx->managed.dl_tensor;
  const storage& st = *t.storage();
  char* first = static_cast<char*>(st.data()); // null for an empty storage
  dl.data = first ? first + t.storage_offset() * int64_t(element_size(t.dtype())) : nullptr;
  // Pinned host memory goes out as kDLCPU, as PyTorch exports it: numpy takes only kDLCPU.
  dl.device =
      t.device().is_cuda() ? DLDevice{kDLCUDA, int32_t(t.device().index)} : DLDevice{kDLCPU, 0};
  dl.ndim = int32_t(t.dim());
  dl.dtype = {code->code, code->bits, 1};
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = delete_export;
  return &ctx.release()->managed;
}

tensor from_dlpack(DLManagedTensor* m) {
  ACTORCH_CHECK(m != nullptr, "from_dlpack: a null DLManagedTensor");
  const DLTensor& dl = m->dl_tensor;
  const std::optional<dtype> dt = dtype_of(dl.dtype);
  ACTORCH_CHECK(dt, "from_dlpack: dtype ", dl_type_str(dl.dtype),
                " has no actorch dtype (actorch has float16/32/64, bfloat16, int8/32/64, "
                "uint8; DLPack 0.6 has no bool)");
  device dev = kCPU;
  if (dl.device.device_type == kDLCUDA) {
    ACTORCH_CHECK(ACTORCH_HAVE_CUDA, "from_dlpack: CUDA memory (device ", dl.device.device_id,
                  "), but actorch was built without CUDA");
    dev = device{device_type::cuda, dl.device.device_id};
  } else {
    ACTORCH_CHECK(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost,
                  "from_dlpack: memory of DLPack device type ", int(dl.device.device_type),
                  " (actorch takes CPU, CUDA host and CUDA memory)");
  }
  ACTORCH_CHECK(dl.ndim >= 0 && (dl.ndim == 0 || dl.shape != nullptr), "from_dlpack: a tensor of ",
                dl.ndim, " dims without a shape");
  const shape_t sizes(dl.shape, dl.shape + dl.ndim);
  shape_t strides; // empty: null strides, compact and row-major
  if (dl.strides)
    strides.assign(dl.strides, dl.strides + dl.ndim);
  for (size_t d = 0; d < strides.size(); ++d)
    ACTORCH_CHECK(strides[d] >= 0, "from_dlpack: negative stride ", strides[d], " in dim ", d,
                  " (actorch's views do not step backwards)");
  char* base = static_cast<char*>(dl.data);
  if (base != nullptr)
    base += dl.byte_offset;
  const size_t item = element_size(*dt);
  ACTORCH_CHECK(reinterpret_cast<uintptr_t>(base) % item == 0, "from_dlpack: the data (at byte ",
                dl.byte_offset, " of ", dl.data, ") is not aligned to its ", item, "-byte ",
                dtype_name(*dt), " elements");
  // Taken once from_blob returns: the storage calls the deleter (Note [DLPack]); if it throws,
  // its copy of the deleter goes unused and `m` stays the caller's.
  return from_blob(
      base, sizes, *dt,
      [m](void*) {
        if (m->deleter)
          m->deleter(m);
      },
      strides, dev);
}

} // namespace actorch
