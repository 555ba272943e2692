// The wire between a dataset worker and its child process (worker_wire.hpp).
#include "actors/loader/worker_wire.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <optional>

#include "actors/loader/shared_batch_file.hpp"
#include "base/fd_io.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors::wire {

bool send_frame(int fd, const std::string& body) {
  const uint64_t n = body.size();
  return send_all(fd, reinterpret_cast<const char*>(&n), sizeof n) == io_result::done &&
         send_all(fd, body.data(), body.size()) == io_result::done;
}

std::string encode_task(const index_batch& t, const std::vector<uint64_t>& released) {
  writer w;
  w.put(t.run_id);
  w.put(t.epoch);
  w.put(t.seq);
  w.put(t.seed);
  w.put<uint8_t>(t.auto_collation);
  w.put<uint64_t>(t.indices.size());
  for (int64_t i : t.indices)
    w.put(i);
  w.put<uint64_t>(t.skip_seeds.size());
  for (uint64_t s : t.skip_seeds)
    w.put(s);
  w.put<uint64_t>(released.size());
  for (uint64_t id : released)
    w.put(id);
  w.put_string(t.keys);
  return std::move(w.out);
}

index_batch decode_task(std::string_view frame, std::vector<uint64_t>& released) {
  reader r(frame);
  index_batch t;
  t.run_id = r.get<uint64_t>();
  t.epoch = r.get<int64_t>();
  t.seq = r.get<int64_t>();
  t.seed = r.get<uint64_t>();
  t.auto_collation = r.get<uint8_t>() != 0;
  t.indices.resize(r.get_count(sizeof(int64_t)));
  for (auto& i : t.indices)
    i = r.get<int64_t>();
  t.skip_seeds.resize(r.get_count(sizeof(uint64_t)));
  for (auto& s : t.skip_seeds)
    s = r.get<uint64_t>();
  released.resize(r.get_count(sizeof(uint64_t)));
  for (auto& id : released)
    id = r.get<uint64_t>();
  t.keys = r.get_string();
  return t;
}

// A reply. -----------------------------------------------------------------------------------

// Note [Custom values across processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A custom value (a batch type of the user's own) crosses to the parent as its to_wire gives
// it: the codec's name in the frame, its bytes as a uint8 tensor and its tensors as tensor
// samples, so that all of them go through the shared file and the frame holds only their
// offsets. The parent rebuilds the value by the codec registered under that name in its own
// process (data::register_custom_codec), on the worker's thread; a codec missing or failing
// fails the batch (codec_failed), the child is not to blame. The Python module registers
// one: a Python collate_fn's batch, or any Python object a batch holds, is pickled with its
// tensors and numpy arrays taken out of the pickle (python/src/convert.cpp, Note [Python
// objects across processes]), as torch's workers pickle a batch and put its tensors in shared
// memory. The bytes are the child's, like the rest of the reply: the codec reads them as such.

// A string of at least kStringInFile bytes travels as a uint8 tensor in the shared file, after
// this tag (no sample kind's number), so that only its offset is in the frame: a 100 MiB str in
// a sample passes as bytes of that size do, and many long ones do not add up past the frame's
// bound.
constexpr uint8_t kStringInFileTag = 0xfe;
constexpr size_t kStringInFile = 4096;

// `lent`: set when a tensor stays in the pool's memory for the parent (Note [Lent batches]).
namespace {

void encode_sample(const data::sample& s, writer& w, shared_file& shm, bool& lent) {
  using kind = data::sample::kind;
  if (s.type() == kind::string && s.as_string().size() >= kStringInFile) {
    const std::string& text = s.as_string();
    w.put<uint8_t>(kStringInFileTag);
    encode_sample(from_blob(const_cast<char*>(text.data()), {int64_t(text.size())}, dtype::uint8,
                            [](void*) {}),
                  w, shm, lent);
    return;
  }
  w.put<uint8_t>(uint8_t(s.type()));
  switch (s.type()) {
  case kind::none: return;
  case kind::tensor: {
    const tensor& t = s.as_tensor();
    ACTORCH_CHECK(t.device().is_cpu(), "a batch tensor on ", t.device(),
                  " cannot leave a worker process (only CPU tensors can)");
    w.put<uint8_t>(uint8_t(t.dtype()));
    w.put<uint64_t>(t.sizes().size());
    for (int64_t d : t.sizes())
      w.put(d);
    bool in_pool = false;
    w.put(shm.append(t, in_pool));
    w.put<uint8_t>(in_pool);
    lent = lent || in_pool;
    return;
  }
  case kind::integer: w.put(s.as_int()); return;
  case kind::floating: w.put(s.as_double()); return;
  case kind::boolean: w.put<uint8_t>(s.as_bool()); return;
  case kind::string: w.put_string(s.as_string()); return;
  case kind::tuple:
    w.put<uint64_t>(s.size());
    for (const auto& item : s.as_tuple())
      encode_sample(item, w, shm, lent);
    return;
  case kind::dict:
    w.put<uint64_t>(s.size());
    for (const auto& [key, item] : s.as_dict()) {
      w.put_string(key);
      encode_sample(item, w, shm, lent);
    }
    return;
  case kind::custom: {
    // The codec's name, the bytes as a uint8 tensor, then the tensors, each as a tensor
    // sample (Note [Custom values across processes]).
    std::optional<data::custom_wire> wire = s.as_custom()->to_wire();
    ACTORCH_CHECK(wire.has_value(), "a batch holding a ", s.as_custom()->type_name(),
                  " (a type of your own) cannot leave a worker process: use worker threads "
                  "(from Python multiprocessing_context=\"thread\", in C++ "
                  "multiprocessing_context unset), give the type to_wire() and register its "
                  "codec (data::register_custom_codec), or make the batch of tensors, numbers, "
                  "strings, tuples and dicts");
    w.put_string(wire->codec);
    encode_sample(
        from_blob(wire->bytes.data(), {int64_t(wire->bytes.size())}, dtype::uint8, [](void*) {}), w,
        shm, lent);
    w.put<uint64_t>(wire->tensors.size());
    for (const tensor& t : wire->tensors)
      encode_sample(t, w, shm, lent);
    return;
  }
  }
}

} // namespace

std::string encode_reply(const loaded_batch& b, shared_file& shm, uint64_t lease, bool& lent) {
  shm.reset();
  lent = false;
  writer w;
  w.put(lease);
  w.put(b.run_id);
  w.put(b.seq);
  w.put<uint8_t>(b.end_of_data);
  w.put<uint8_t>(b.collated);
  w.put_string(b.error);
  if (b.error.empty())
    encode_sample(b.data, w, shm, lent);
  w.put(shm.used()); // last: the parent maps this much before it decodes
  return std::move(w.out);
}

data::sample decode_sample(reader& r, char* base, uint64_t bytes, data::buffer_pool* pool,
                           const std::shared_ptr<void>& lease, int depth) {
  using kind = data::sample::kind;
  ACTORCH_CHECK(depth < 64, "worker process: a batch nested deeper than 64");
  const uint8_t tag = r.get<uint8_t>();
  if (tag == kStringInFileTag) {
    const data::sample raw = decode_sample(r, base, bytes, nullptr, nullptr, depth + 1);
    ACTORCH_CHECK(raw.is_tensor() && raw.as_tensor().dtype() == dtype::uint8 &&
                      raw.as_tensor().dim() == 1,
                  "worker process: a long string's bytes are not a uint8 vector");
    const tensor& b = raw.as_tensor();
    return std::string(static_cast<const char*>(b.data_ptr()), size_t(b.numel()));
  }
  const auto k = kind(tag);
  switch (k) {
  case kind::none: return {};
  case kind::tensor: {
    const uint8_t code = r.get<uint8_t>();
    ACTORCH_CHECK(code < num_dtypes, "worker process: unknown dtype ", int(code));
    const auto dt = dtype(code);
    const uint64_t ndim = r.get<uint64_t>();
    ACTORCH_CHECK(ndim <= 64, "worker process: a tensor of ", ndim, " dims");
    shape_t shape(static_cast<size_t>(ndim));
    uint64_t n = element_size(dt);
    for (auto& d : shape) {
      d = r.get<int64_t>();
      ACTORCH_CHECK(d >= 0 && !__builtin_mul_overflow(n, uint64_t(d), &n),
                    "worker process: a bad shape");
    }
    const uint64_t at = r.get<uint64_t>();
    const bool lent = r.get<uint8_t>() != 0;
    ACTORCH_CHECK(at <= bytes && n <= bytes - at,
                  "worker process: a tensor outside the shared file");
    ACTORCH_CHECK(at % element_size(dt) == 0, "worker process: a tensor at offset ", at,
                  ", not aligned to its ", element_size(dt), "-byte elements");
    if (lent && lease != nullptr)
      return from_blob(base + at, shape, dt, [lease](void*) {});
    tensor t = pool ? pool->empty(shape, dt) : empty(shape, {.dtype = dt});
    if (n > 0)
      std::memcpy(t.data_ptr(), base + at, n);
    return t;
  }
  case kind::integer: return r.get<int64_t>();
  case kind::floating: return r.get<double>();
  case kind::boolean: return r.get<uint8_t>() != 0;
  case kind::string: return r.get_string();
  case kind::tuple: {
    data::sample::tuple items(r.get_count(sizeof(data::sample)));
    for (auto& item : items)
      item = decode_sample(r, base, bytes, pool, lease, depth + 1);
    return items;
  }
  case kind::dict: {
    data::sample::dict items(r.get_count(sizeof(data::sample::dict::value_type)));
    for (auto& [key, item] : items) {
      key = r.get_string();
      item = decode_sample(r, base, bytes, pool, lease, depth + 1);
    }
    return items;
  }
  case kind::custom: { // Note [Custom values across processes]
    data::custom_wire wire;
    wire.codec = r.get_string();
    const data::sample raw = decode_sample(r, base, bytes, pool, lease, depth + 1);
    ACTORCH_CHECK(raw.is_tensor() && raw.as_tensor().dtype() == dtype::uint8 &&
                      raw.as_tensor().dim() == 1,
                  "worker process: a custom value's bytes are not a uint8 vector");
    const tensor& b = raw.as_tensor();
    wire.bytes.assign(static_cast<const char*>(b.data_ptr()), size_t(b.numel()));
    wire.tensors.resize(r.get_count(sizeof(tensor)));
    for (tensor& t : wire.tensors) {
      data::sample item = decode_sample(r, base, bytes, pool, lease, depth + 1);
      ACTORCH_CHECK(item.is_tensor(), "worker process: a custom value's tensor is a ",
                    data::kind_name(item.type()));
      t = item.as_tensor();
    }
    try {
      return data::custom_from_wire(std::move(wire));
    } catch (const std::exception& e) {
      throw codec_failed(e.what());
    }
  }
  }
  ACTORCH_FAIL("worker process: unknown sample kind ", int(k));
}

} // namespace actorch::actors::wire

namespace actorch::actors {

using wire::reader;
using wire::writer;

// The first frame of a spawned child (Note [Spawned workers] in worker_process.cpp).
std::string worker_process::spawn_frame(const spawn_header& h, const std::string& payload) {
  writer w;
  w.put(h.id);
  w.put(h.num_workers);
  w.put(h.base_seed);
  w.put(h.batch_size);
  w.put<uint8_t>(h.drop_last);
  w.put(h.cpu);
  w.put(h.start_cpu);
  w.put_string(payload);
  return std::move(w.out);
}

std::pair<worker_process::spawn_header, std::string>
worker_process::parse_spawn_frame(std::string_view frame) {
  reader r(frame);
  spawn_header h;
  h.id = r.get<int64_t>();
  h.num_workers = r.get<int64_t>();
  h.base_seed = r.get<uint64_t>();
  h.batch_size = r.get<int64_t>();
  h.drop_last = r.get<uint8_t>() != 0;
  h.cpu = r.get<int32_t>();
  h.start_cpu = r.get<int32_t>();
  std::string payload = r.get_string();
  ACTORCH_CHECK(r.done(), "worker process: a first frame longer than its fields");
  return {h, std::move(payload)};
}

} // namespace actorch::actors
