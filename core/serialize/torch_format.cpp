// torch.save / torch.load(weights_only=True) for state dicts: the zip layout (archive/data.pkl,
// archive/data/<key>, archive/version) around pickle.cpp's pickles.
#include "core/serialize/torch_format.hpp"

#include <cstring>
#include <map>

#include "core/ops/factory.hpp"
#include "core/serialize/atomic_write.hpp"
#include "core/serialize/file_io.hpp"
#include "core/serialize/safetensors.hpp"
#include "core/serialize/zip_archive.hpp"

namespace actorch {

bool torch_checkpoint_path(const std::string& path) {
  return path.ends_with(".pt") || path.ends_with(".pth");
}

namespace {

// Note [Checkpoint memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A checkpoint is checked before its data is read: its first bytes (a zip's local header, or
// the legacy format's pickle), then the zip's end records and central directory, which lie at
// its end; a file that is no checkpoint is refused after reading those few KiB, whatever its
// size. Each storage record is then read straight into its tensor (a stored one with pread, a
// deflated one inflated from 1 MiB slices), so loading holds the tensors, data.pkl and the
// central directory, never a copy of the file or of a record.
pickle_value load_from(serialize::byte_source& src, const std::string& name,
                       storage_locations* locations) {
  char head[4] = {};
  if (src.size() >= 4)
    src.read_at(0, head, 4);
  if (src.size() >= 2 && uint8_t(head[0]) == 0x80)
    ACTORCH_FAIL("torch_load: ", name,
                 ": PyTorch's legacy checkpoint format (torch.save with "
                 "_use_new_zipfile_serialization=False, or PyTorch before 1.6), which is not "
                 "supported: load it in PyTorch and save it again with torch.save");
  ACTORCH_CHECK(src.size() >= 4 && std::string_view(head, 4) == std::string_view("PK\x03\x04", 4),
                "torch_load: ", name, ": not a PyTorch checkpoint (a zip archive from torch.save)");
  const serialize::zip_reader zip(src, name);
  ACTORCH_CHECK(!zip.names().empty(), "torch_load: ", name, ": an empty archive");
  // Every record lies under one folder, named as torch chose (the file's stem, or "archive").
  const std::string& first = zip.names().front();
  const std::string prefix = first.substr(0, first.find('/') + 1);
  ACTORCH_CHECK(zip.has(prefix + "data.pkl"), "torch_load: ", name, ": no ", prefix,
                "data.pkl in the archive (not a torch.save checkpoint)");
  const std::string pkl = zip.read(prefix + "data.pkl");
  return unpickle(pkl, name, [&](const pickle_storage& s) {
    const std::string record = prefix + "data/" + s.key;
    ACTORCH_CHECK(zip.has(record), "torch_load: ", name, ": storage ", s.key, " has no record ",
                  record);
    const uint64_t have = zip.size_of(record);
    const uint64_t want = uint64_t(s.numel) * element_size(s.type);
    ACTORCH_CHECK(have >= want, "torch_load: ", name, ": storage ", s.key, " holds ", have,
                  " bytes, short of its ", s.numel, " elements (", want, " bytes)");
    tensor t = empty({s.numel}, {.dtype = s.type});
    if (have == want) {
      if (want > 0)
        zip.read_into(record, static_cast<char*>(t.storage()->data()));
    } else { // a record longer than its elements: read whole, keep the elements
      const std::string data = zip.read(record);
      std::memcpy(t.storage()->data(), data.data(), size_t(want));
    }
    if (locations)
      (*locations)[t.storage().get()] = s.location;
    return t;
  });
}

} // namespace

pickle_value torch_load_bytes(std::string_view bytes, const std::string& name,
                              storage_locations* locations) {
  serialize::memory_source src(bytes);
  return load_from(src, name, locations);
}

pickle_value torch_load(const std::string& path, storage_locations* locations) {
  const serialize::where w{"torch_load", path};
  serialize::file_source src(w);
  return load_from(src, path, locations);
}

std::string torch_save_bytes(const pickle_value& value) {
  // One record per storage; the same storage (views) under one key. A tensor off the CPU is
  // copied there, its copy kept alive until the records are written.
  std::map<std::pair<const void*, dtype>, std::string> keys;
  std::vector<std::pair<std::string, tensor>> records;
  const std::string pkl = pickle(value, [&](const tensor& t) -> std::string {
    ACTORCH_CHECK(t.device().is_cpu(), "torch_save: a tensor on ", t.device(),
                  " (copy it to the CPU first)");
    const auto id = std::make_pair(static_cast<const void*>(t.storage().get()), t.dtype());
    auto it = keys.find(id);
    if (it != keys.end())
      return it->second;
    const std::string key = std::to_string(keys.size());
    keys.emplace(id, key);
    records.emplace_back(key, t);
    return key;
  });
  serialize::zip_writer zip;
  zip.add("archive/data.pkl", pkl);
  for (const auto& [key, t] : records) {
    const size_t n = t.storage()->nbytes() / t.element_size() * t.element_size();
    zip.add("archive/data/" + key,
            std::string_view(static_cast<const char*>(t.storage()->data()), n));
  }
  zip.add("archive/version", "3\n");
  return zip.finish();
}

void torch_save(const std::string& path, const pickle_value& value) {
  // CUDA tensors to the CPU first (the pickler sees the copies).
  std::function<pickle_value(const pickle_value&)> to_cpu = [&](const pickle_value& v) {
    return std::visit(
        [&](const auto& x) -> pickle_value {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, tensor>) {
            pickle_value out = x.device().is_cpu() ? x : x.to(kCPU);
            out.parameter = v.parameter;
            out.requires_grad = v.requires_grad;
            return out;
          } else if constexpr (std::is_same_v<T, pickle_value::tuple> ||
                               std::is_same_v<T, pickle_value::list>) {
            T out;
            for (const auto& i : x.items)
              out.items.push_back(to_cpu(i));
            return out;
          } else if constexpr (std::is_same_v<T, pickle_value::dict>) {
            pickle_value::dict out;
            out.ordered = x.ordered;
            for (const auto& [k, val] : x.items)
              out.items.emplace_back(k, to_cpu(val));
            for (const auto& [name, val] : x.attributes)
              out.attributes.emplace_back(name, to_cpu(val));
            return out;
          } else {
            return x;
          }
        },
        v.v);
  };
  write_file_atomically(path, torch_save_bytes(to_cpu(value)), "torch_save");
}

named_tensor_list torch_state_dict(const pickle_value& value, const std::string& name) {
  const auto* d = std::get_if<pickle_value::dict>(&value.v);
  ACTORCH_CHECK(d != nullptr, "torch_load: ", name,
                ": expected a state dict (a dict of names to tensors) but the file holds another "
                "value (a whole model pickled with torch.save(model) cannot be read: save "
                "model.state_dict())");
  named_tensor_list out;
  for (const auto& [k, v] : d->items) {
    const auto* key = std::get_if<std::string>(&k.v);
    ACTORCH_CHECK(key != nullptr, "torch_load: ", name, ": a state dict key that is not a string");
    const auto* t = std::get_if<tensor>(&v.v);
    ACTORCH_CHECK(t != nullptr, "torch_load: ", name, ": ", *key, " is not a tensor");
    out.emplace_back(*key, *t);
  }
  return out;
}

pickle_value state_dict_value(const named_tensor_list& tensors) {
  pickle_value::dict d;
  d.ordered = true;
  for (const auto& [k, t] : tensors)
    d.items.emplace_back(k, t);
  return d;
}

named_tensor_list load_state_dict_file(const std::string& path) {
  if (torch_checkpoint_path(path))
    return torch_state_dict(torch_load(path), path);
  ACTORCH_CHECK(path.ends_with(".safetensors"), "load_state_dict_file: ", path,
                ": unknown extension (.pt, .pth or .safetensors)");
  return load_safetensors(path).tensors;
}

void save_state_dict_file(const std::string& path, const named_tensor_list& tensors) {
  if (torch_checkpoint_path(path))
    return torch_save(path, state_dict_value(tensors));
  ACTORCH_CHECK(path.ends_with(".safetensors"), "save_state_dict_file: ", path,
                ": unknown extension (.pt, .pth or .safetensors)");
  save_safetensors(path, tensors);
}

} // namespace actorch
