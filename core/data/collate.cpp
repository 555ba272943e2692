// default_collate and pin_memory. Stacking copies each sample once into its slice of a batch
// buffer (memcpy when the sample is contiguous, the general strided copy otherwise).
#include "core/data/collate.hpp"

#include <cstring>

#include "core/ops/factory.hpp"

namespace actorch::data {

namespace {

tensor batch_buffer(const shape_t& shape, actorch::dtype dt, buffer_pool* pool) {
  return pool ? pool->empty(shape, dt) : empty(shape, {.dtype = dt});
}

tensor stack_into(const std::vector<const tensor*>& ts, buffer_pool* pool, const std::string& path) {
  const tensor& first = *ts[0];
  for (size_t i = 1; i < ts.size(); ++i) {
    ACTORCH_CHECK(ts[i]->sizes() == first.sizes(), "default_collate: ", path,
                  ": stack expects each tensor to be equal size, but sample 0 has shape ",
                  shape_str(first.sizes()), " and sample ", i, " has shape ",
                  shape_str(ts[i]->sizes()));
    ACTORCH_CHECK(ts[i]->dtype() == first.dtype(), "default_collate: ", path,
                  ": tensors of different dtypes, sample 0 is ", dtype_name(first.dtype()),
                  " and sample ", i, " is ", dtype_name(ts[i]->dtype()));
    ACTORCH_CHECK(ts[i]->device() == first.device(), "default_collate: ", path,
                  ": tensors on different devices (sample 0 and sample ", i, ")");
  }
  shape_t shape = first.sizes();
  shape.insert(shape.begin(), int64_t(ts.size()));
  tensor out = batch_buffer(shape, first.dtype(), pool);
  const size_t row = first.nbytes();
  auto* dst = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i]->is_contiguous())
      std::memcpy(dst + i * row, ts[i]->data_ptr(), row);
    else
      out.select(0, int64_t(i)).copy_(*ts[i]);
  }
  return out;
}

template <class T, class Get>
tensor numbers_into(const std::vector<sample>& batch, actorch::dtype dt, buffer_pool* pool, Get get) {
  tensor out = batch_buffer({int64_t(batch.size())}, dt, pool);
  T* p = static_cast<T*>(out.data_ptr());
  for (size_t i = 0; i < batch.size(); ++i) p[i] = T(get(batch[i]));
  return out;
}

sample collate(const std::vector<sample>& batch, buffer_pool* pool, const std::string& path) {
  ACTORCH_CHECK(!batch.empty(), "default_collate: empty batch");
  const sample::kind k = batch[0].type();
  for (size_t i = 1; i < batch.size(); ++i)
    ACTORCH_CHECK(batch[i].type() == k, "default_collate: ", path, ": sample 0 is a ",
                  kind_name(k), " but sample ", i, " is a ", kind_name(batch[i].type()));
  switch (k) {
  case sample::kind::none:
    ACTORCH_FAIL("default_collate: ", path,
                 ": batch must contain tensors, numbers, strings, dicts or tuples; found None");
  case sample::kind::tensor: {
    std::vector<const tensor*> ts;
    ts.reserve(batch.size());
    for (const auto& s : batch) ts.push_back(&s.as_tensor());
    return stack_into(ts, pool, path);
  }
  case sample::kind::integer:
    return numbers_into<int64_t>(batch, dtype::int64, pool,
                                 [](const sample& s) { return s.as_int(); });
  case sample::kind::floating:
    return numbers_into<double>(batch, dtype::float64, pool,
                                [](const sample& s) { return s.as_double(); });
  case sample::kind::boolean:
    return numbers_into<uint8_t>(batch, dtype::bool_, pool,
                                 [](const sample& s) { return s.as_bool(); });
  case sample::kind::string: return sample(sample::tuple(batch.begin(), batch.end()));
  case sample::kind::tuple: {
    const size_t n = batch[0].as_tuple().size();
    for (size_t i = 1; i < batch.size(); ++i)
      ACTORCH_CHECK(batch[i].as_tuple().size() == n, "default_collate: ", path,
                    ": each element in list of batch should be of equal size, but sample 0 has ",
                    n, " elements and sample ", i, " has ", batch[i].as_tuple().size());
    sample::tuple out;
    out.reserve(n);
    std::vector<sample> column(batch.size());
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < batch.size(); ++i) column[i] = batch[i].as_tuple()[j];
      out.push_back(collate(column, pool, path + "[" + std::to_string(j) + "]"));
    }
    return sample(std::move(out));
  }
  case sample::kind::dict: {
    const auto& keys = batch[0].as_dict();
    for (size_t i = 1; i < batch.size(); ++i)
      ACTORCH_CHECK(batch[i].as_dict().size() == keys.size(), "default_collate: ", path,
                    ": sample 0 has ", keys.size(), " keys but sample ", i, " has ",
                    batch[i].as_dict().size());
    sample::dict out;
    std::vector<sample> column(batch.size());
    for (const auto& [key, unused] : keys) {
      for (size_t i = 0; i < batch.size(); ++i) {
        const auto& d = batch[i].as_dict();
        const sample* found = nullptr;
        for (const auto& kv : d)
          if (kv.first == key) found = &kv.second;
        ACTORCH_CHECK(found != nullptr, "default_collate: ", path, ": key '", key,
                      "' of sample 0 is missing from sample ", i);
        column[i] = *found;
      }
      out.emplace_back(key, collate(column, pool, path + "['" + key + "']"));
    }
    return sample(std::move(out));
  }
  }
  ACTORCH_FAIL("default_collate: unknown sample kind");
}

} // namespace

sample default_collate(std::vector<sample> batch, buffer_pool* pool) {
  return collate(batch, pool, "batch");
}

sample default_convert(sample s) {
  switch (s.type()) {
  case sample::kind::integer: return scalar_tensor(s.as_int(), {.dtype = dtype::int64});
  case sample::kind::floating: return scalar_tensor(s.as_double(), {.dtype = dtype::float64});
  case sample::kind::boolean: return scalar_tensor(s.as_bool(), {.dtype = dtype::bool_});
  case sample::kind::tuple:
    for (auto& e : s.as_tuple()) e = default_convert(std::move(e));
    return s;
  case sample::kind::dict:
    for (auto& kv : s.as_dict()) kv.second = default_convert(std::move(kv.second));
    return s;
  default: return s;
  }
}

sample pin_memory(const sample& s, buffer_pool& pool) {
  sample out = s;
  out.for_each_tensor([&](tensor& t) {
    tensor pinned = pool.empty(t.sizes(), t.dtype());
    pinned.copy_(t);
    t = pinned;
  });
  return out;
}

} // namespace actorch::data
