// default_collate and pin_memory. Stacking copies each sample once into its row of a batch
// buffer (memcpy when the sample is contiguous, the general strided copy otherwise).
//
// Note [Streaming collate]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's worker loads a batch's samples into a list, then collates the list. With the default
// collate_fn an actorch worker copies each sample into the batch as soon as it is loaded (a
// collator: buffers taken at sample 0, one row per add()) and drops it. The sample is copied
// while the dataset's writes to it are still in the core's L1/L2, not after 63 more samples
// pushed them out; and the worker holds one sample instead of a batch of them. 64 samples of
// 12 KiB freed together made glibc trim the heap after each batch and fault it back in for the
// next, and in a process with several threads each TLB flush also interrupts the other cores
// running it (faults, flushes and the loader's gain: docs/performance.md). An iterable dataset's
// worker streams the same way (a short last batch is the first rows of the buffers).
// default_collate of a list is the same collator, so the two cannot drift apart; a user's
// collate_fn and unbatched loading still collect the list.
#include "core/data/collate.hpp"

#include <cstring>

#include "core/data/worker_info.hpp"
#include "core/ops/factory.hpp"

namespace actorch::data {

namespace {

tensor batch_buffer(const shape_t& shape, actorch::dtype dt, buffer_pool* pool) {
  return pool ? pool->empty(shape, dt) : empty(shape, {.dtype = dt});
}

bool is_number(sample::kind k) {
  return k == sample::kind::integer || k == sample::kind::floating || k == sample::kind::boolean;
}

/// A number sample's value (a bool as 0 or 1).
double number_of(const sample& s) {
  return s.type() == sample::kind::boolean ? double(s.as_bool()) : s.as_double();
}

// Note [Mixed numbers in a batch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's default_collate makes a batch of numbers with torch.tensor(batch), its dtype from the
// first sample: float64 when it is a float (the others converted), otherwise what torch.tensor
// infers for the whole list: bool for bools only, int64 for ints and bools, and float32 (the
// default dtype) once a float is among them. The buffer starts with sample 0's dtype and is
// widened (bool -> int64 -> float32) when a later sample needs it, rows so far converted.
actorch::dtype widened(actorch::dtype have, sample::kind incoming) {
  if (have == dtype::float64 || have == dtype::float32)
    return have;
  if (incoming == sample::kind::floating)
    return dtype::float32;
  if (incoming == sample::kind::integer)
    return dtype::int64;
  return have;
}

// Note [Mixed dtypes in a stack]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch's default_collate stacks tensors of several dtypes two ways. In the loader's process
// (num_workers=0, or default_collate called by hand) torch.stack promotes them to one dtype
// (torch.promote_types over them all): a float32 sample and a float64 one make float64. In a
// worker it stacks into a buffer of sample 0's dtype (torch.stack's out=, for shared memory), so
// the batch keeps sample 0's dtype and a sample that torch.can_cast refuses (a float into an int
// batch, anything but bool into a bool one) is an error. The same here, told apart as torch
// tells them apart, by get_worker_info(). The buffer starts with sample 0's dtype; promoted, a
// sample of a wider one makes it that dtype (the rows so far converted into a new buffer); any
// other sample is converted into its row.

/// torch.can_cast: no float to an integer (or bool), nothing but bool to bool.
bool can_cast(actorch::dtype from, actorch::dtype to) {
  if (is_floating_point(from) && is_integral(to, /*include_bool=*/true))
    return false;
  return from == dtype::bool_ || to != dtype::bool_;
}

} // namespace

/// One element of sample 0's structure (the root is the sample itself), with what its batch
/// holds so far: a stacked buffer (tensors and numbers), the strings, or one node per tuple
/// element or dict key.
struct collator::node {
  std::string path; // "batch[0]['image']", for errors
  sample::kind kind = sample::kind::none;
  tensor buffer;                               // [batch_size, ...] for tensors and numbers
  shape_t shape;                               // sample 0's tensor shape
  actorch::device device;                      // sample 0's tensor device
  size_t row_bytes = 0;                        // one sample's tensor bytes
  sample::tuple strings;                       // the strings (or bytes) so far
  std::vector<std::string> keys;               // dict: sample 0's keys, in its order
  std::vector<std::unique_ptr<node>> children; // tuple elements or dict values

  explicit node(std::string p) : path(std::move(p)) {}

  /// Sample 0: takes the kind, shapes and buffers.
  void start(const sample& s, int64_t size, buffer_pool* pool) {
    kind = s.type();
    switch (kind) {
    case sample::kind::none:
      ACTORCH_FAIL("default_collate: ", path,
                   ": batch must contain tensors, numbers, strings, dicts or tuples; found None");
    case sample::kind::custom:
      if (s.as_custom()->collates_as_sequence()) { // Python's bytes: batched as strings are
        strings.reserve(size_t(size));
        break;
      }
      ACTORCH_FAIL("default_collate: ", path,
                   ": batch must contain tensors, numbers, strings, dicts or tuples; found a ",
                   s.as_custom()->type_name(),
                   " (a type of your own: give the loader a collate_fn that batches it)");
    case sample::kind::tensor: {
      const tensor& t = s.as_tensor();
      shape = t.sizes();
      device = t.device();
      buffer = stacked_buffer(t.dtype(), size, pool);
      row_bytes = t.nbytes();
      break;
    }
    case sample::kind::integer: buffer = batch_buffer({size}, dtype::int64, pool); break;
    case sample::kind::floating: buffer = batch_buffer({size}, dtype::float64, pool); break;
    case sample::kind::boolean: buffer = batch_buffer({size}, dtype::bool_, pool); break;
    case sample::kind::string: strings.reserve(size_t(size)); break;
    case sample::kind::tuple: {
      const auto& items = s.as_tuple();
      for (size_t j = 0; j < items.size(); ++j)
        children.push_back(std::make_unique<node>(path + "[" + std::to_string(j) + "]"));
      break;
    }
    case sample::kind::dict:
      for (const auto& kv : s.as_dict()) {
        keys.push_back(kv.first);
        children.push_back(std::make_unique<node>(path + "['" + kv.first + "']"));
      }
      break;
    }
  }

  /// Sample i: checks it agrees with sample 0 and puts it in row i.
  void add(const sample& s, int64_t i, int64_t size, buffer_pool* pool) {
    if (i == 0)
      start(s, size, pool);
    else if (!batched_as_list())
      ACTORCH_CHECK(s.type() == kind || (is_number(kind) && is_number(s.type())),
                    "default_collate: ", path, ": sample 0 is a ", kind_name(kind), " but sample ",
                    i, " is a ", kind_name(s.type()));
    switch (kind) {
    case sample::kind::none: break; // start() threw
    case sample::kind::custom:
    case sample::kind::string: strings.push_back(s); break;
    case sample::kind::tensor: add_tensor(s.as_tensor(), i, size, pool); break;
    case sample::kind::integer:
    case sample::kind::floating:
    case sample::kind::boolean: add_number(s, i, size, pool); break;
    case sample::kind::tuple: {
      const auto& items = s.as_tuple();
      ACTORCH_CHECK(items.size() == children.size(), "default_collate: ", path,
                    ": each element in list of batch should be of equal size, but sample 0 has ",
                    children.size(), " elements and sample ", i, " has ", items.size());
      for (size_t j = 0; j < items.size(); ++j)
        children[j]->add(items[j], i, size, pool);
      break;
    }
    case sample::kind::dict: { // sample 0's keys, as torch's: another sample's others are left
      const auto& d = s.as_dict();
      for (size_t k = 0; k < keys.size(); ++k) {
        const sample* found = nullptr;
        for (const auto& kv : d)
          if (kv.first == keys[k])
            found = &kv.second;
        ACTORCH_CHECK(found != nullptr, "default_collate: ", path, ": key '", keys[k],
                      "' of sample 0 is missing from sample ", i);
        children[k]->add(*found, i, size, pool);
      }
      break;
    }
    }
  }

  /// [size, shape...] of `dt` for the stacked tensors: on their device (samples on a GPU stack
  /// there, as torch.stack does; the pool holds host memory).
  tensor stacked_buffer(actorch::dtype dt, int64_t size, buffer_pool* pool) const {
    shape_t stacked = shape;
    stacked.insert(stacked.begin(), size);
    return device.is_cpu() ? batch_buffer(stacked, dt, pool)
                           : empty(stacked, {.dtype = dt, .device = device});
  }

  /// torch's default_collate returns a batch whose sample 0 is a string (or bytes) as the list
  /// of the samples, whatever the others are.
  bool batched_as_list() const {
    return kind == sample::kind::string || kind == sample::kind::custom;
  }

  /// Note [Mixed dtypes in a stack]: the buffer as `dt`, its first `rows` rows converted.
  void promote(actorch::dtype dt, int64_t rows, int64_t size, buffer_pool* pool) {
    if (dt == buffer.dtype())
      return;
    tensor wider = stacked_buffer(dt, size, pool);
    if (rows > 0)
      wider.narrow(0, 0, rows).copy_(buffer.narrow(0, 0, rows));
    buffer = std::move(wider);
    row_bytes = size_t(buffer.numel() / size) * buffer.element_size();
  }

  /// Note [Mixed numbers in a batch].
  void add_number(const sample& s, int64_t i, int64_t size, buffer_pool* pool) {
    if (const actorch::dtype dt = widened(buffer.dtype(), s.type()); dt != buffer.dtype()) {
      tensor wider = batch_buffer({size}, dt, pool);
      for (int64_t r = 0; r < i; ++r)
        put(wider, r,
            buffer.dtype() == dtype::bool_
                ? double(static_cast<const uint8_t*>(buffer.data_ptr())[r])
                : double(buffer.data_ptr<int64_t>()[r]));
      buffer = std::move(wider);
    }
    if (buffer.dtype() == dtype::int64 || buffer.dtype() == dtype::bool_)
      put_exact(s, i);
    else
      put(buffer, i, number_of(s));
  }
  void put_exact(const sample& s, int64_t i) { // ints and bools, without a double between
    if (buffer.dtype() == dtype::bool_)
      static_cast<uint8_t*>(buffer.data_ptr())[i] = s.as_bool();
    else
      buffer.data_ptr<int64_t>()[i] =
          s.type() == sample::kind::boolean ? int64_t(s.as_bool()) : s.as_int();
  }
  static void put(tensor& t, int64_t i, double v) {
    switch (t.dtype()) {
    case dtype::float64: t.data_ptr<double>()[i] = v; break;
    case dtype::float32: t.data_ptr<float>()[i] = float(v); break;
    case dtype::int64: t.data_ptr<int64_t>()[i] = int64_t(v); break;
    default: static_cast<uint8_t*>(t.data_ptr())[i] = v != 0; break;
    }
  }

  void add_tensor(const tensor& t, int64_t i, int64_t size, buffer_pool* pool) {
    ACTORCH_CHECK(t.sizes() == shape, "default_collate: ", path,
                  ": stack expects each tensor to be equal size, but sample 0 has shape ",
                  shape_str(shape), " and sample ", i, " has shape ", shape_str(t.sizes()));
    ACTORCH_CHECK(t.device() == device, "default_collate: ", path,
                  ": tensors on different devices (sample 0 and sample ", i, ")");
    if (t.dtype() != buffer.dtype()) { // Note [Mixed dtypes in a stack]
      if (get_worker_info() == nullptr)
        promote(promote_types(buffer.dtype(), t.dtype()), i, size, pool);
      else
        ACTORCH_CHECK(can_cast(t.dtype(), buffer.dtype()), "default_collate: ", path,
                      ": in a worker, sample 0's dtype is the batch's (as torch's workers stack "
                      "into it), and sample ",
                      i, "'s ", dtype_name(t.dtype()), " can't be cast to ",
                      dtype_name(buffer.dtype()));
      if (t.dtype() != buffer.dtype()) { // converted into its row
        buffer.select(0, i).copy_(t);
        return;
      }
    }
    if (t.is_contiguous() && t.device().is_cpu())
      std::memcpy(static_cast<char*>(buffer.data_ptr()) + size_t(i) * row_bytes, t.data_ptr(),
                  row_bytes);
    else
      buffer.select(0, i).copy_(t);
  }

  /// The batch of the first `rows` samples.
  sample result(int64_t rows) {
    switch (kind) {
    case sample::kind::string:
    case sample::kind::custom: return sample(std::move(strings));
    case sample::kind::tuple: {
      sample::tuple out;
      out.reserve(children.size());
      for (auto& c : children)
        out.push_back(c->result(rows));
      return sample(std::move(out));
    }
    case sample::kind::dict: {
      sample::dict out;
      out.reserve(children.size());
      for (size_t k = 0; k < children.size(); ++k)
        out.emplace_back(std::move(keys[k]), children[k]->result(rows));
      return sample(std::move(out));
    }
    default: return sample(rows == buffer.size(0) ? std::move(buffer) : buffer.narrow(0, 0, rows));
    }
  }
};

collator::collator(int64_t batch_size, buffer_pool* pool)
    : root_(std::make_unique<node>("batch")), size_(batch_size), pool_(pool) {
  ACTORCH_CHECK(batch_size > 0, "default_collate: empty batch");
}

collator::collator(collator&&) noexcept = default;
collator& collator::operator=(collator&&) noexcept = default;
collator::~collator() = default;

void collator::add(const sample& s) {
  ACTORCH_CHECK(root_ != nullptr, "collator: add() after finish() or after an error");
  ACTORCH_CHECK(added_ < size_, "collator: sample ", added_, " added to a batch of ", size_);
  // Held outside root_ meanwhile, so that an error leaves the collator unusable: the batch it
  // was filling is partly written, and nothing could resume it.
  auto root = std::move(root_);
  root->add(s, added_, size_, pool_);
  root_ = std::move(root);
  ++added_;
}

sample collator::finish() {
  ACTORCH_CHECK(root_ != nullptr, "collator: finish() after finish() or after an error");
  ACTORCH_CHECK(added_ > 0, "default_collate: empty batch");
  sample out = root_->result(added_);
  root_.reset();
  return out;
}

sample default_collate(std::vector<sample> batch, buffer_pool* pool) {
  collator c(int64_t(batch.size()), pool);
  for (const auto& s : batch)
    c.add(s);
  return c.finish();
}

sample default_convert(sample s) {
  switch (s.type()) {
  case sample::kind::integer: return scalar_tensor(s.as_int(), {.dtype = dtype::int64});
  case sample::kind::floating: return scalar_tensor(s.as_double(), {.dtype = dtype::float64});
  case sample::kind::boolean: return scalar_tensor(s.as_bool(), {.dtype = dtype::bool_});
  case sample::kind::tuple:
    for (auto& e : s.as_tuple())
      e = default_convert(std::move(e));
    return s;
  case sample::kind::dict:
    for (auto& kv : s.as_dict())
      kv.second = default_convert(std::move(kv.second));
    return s;
  default: return s;
  }
}

namespace {
// Tensors replaced by pinned copies, through tuples and dicts; a custom value pins itself
// (its pin_memory hook, as torch calls a custom batch's pin_memory()).
void pin_in_place(sample& s, const custom_value::pin_fn& pin) {
  switch (s.type()) {
  case sample::kind::tensor: s = pin(s.as_tensor()); return;
  case sample::kind::tuple:
    for (auto& e : s.as_tuple())
      pin_in_place(e, pin);
    return;
  case sample::kind::dict:
    for (auto& kv : s.as_dict())
      pin_in_place(kv.second, pin);
    return;
  case sample::kind::custom: s.as_custom()->pin_memory(pin); return;
  default: return;
  }
}
} // namespace

sample pin_memory(const sample& s, buffer_pool& pool) {
  sample out = s;
  pin_in_place(out, [&pool](const tensor& t) {
    tensor pinned = pool.empty(t.sizes(), t.dtype());
    pinned.copy_(t);
    return pinned;
  });
  return out;
}

} // namespace actorch::data
