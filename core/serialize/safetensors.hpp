// Checkpoints in the safetensors format (Hugging Face's, read and written by the Python
// `safetensors` package): named tensors and string metadata in one file, so that state dicts
// move between actorch and PyTorch without pickle. load_into is the file side of
// load_state_dict: it checks a whole checkpoint against the targets before writing any.
// See Note [safetensors layout] in safetensors.cpp for the format and what is rejected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace actorch {

/// The contents of a safetensors file.
struct safetensors_file {
  /// Sorted by name; each a new contiguous CPU tensor.
  std::vector<std::pair<std::string, tensor>> tensors;
  /// The header's optional "__metadata__" object (empty when the file has none).
  std::map<std::string, std::string> metadata;
};

/// safetensors.torch.save_file: writes `tensors` (sorted by name, data in that order, each in
/// C order; CUDA tensors are copied to the CPU) and `metadata`. Every dtype is supported.
/// Throws actorch::error naming `path` and the problem for a duplicate or reserved
/// ("__metadata__") name, a name or metadata string that is not valid UTF-8, an undefined
/// tensor, and any failure to write. The file is written to a temporary file in the same
/// directory, fsync'ed, renamed over `path`, and the directory fsync'ed.
/// @post on failure `path` is untouched and no temporary file is left behind.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// safetensors.torch.load_file: every tensor of the file, plus its metadata. Throws
/// actorch::error naming `path`, the problem and the tensor's name where there is one, for a
/// file that is not exactly a valid safetensors file of actorch's dtypes.
safetensors_file load_safetensors(const std::string& path);

/// The file side of load_state_dict: copies the file's tensors into `targets` by name with
/// copy_, so views and the targets' own storage are written through.
/// Throws actorch::error, naming the file and the key, for a key of `targets` missing from
/// the file, a key of the file not in `targets` (when `strict`), a shape or dtype that differs
/// (with both), a target that copy_ cannot write (not on the CPU, broadcast), duplicate target
/// names, and every problem load_safetensors reports.
/// @post on failure no target has been written: every check, and the reading of every value,
/// happens before the first copy_.
void load_into(const std::string& path, const std::vector<std::pair<std::string, tensor>>& targets,
               bool strict = true);

/// The bytes save_safetensors would write.
std::string safetensors_to_bytes(const std::vector<std::pair<std::string, tensor>>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

/// load_safetensors over bytes in memory; `name_for_errors` stands in for the path in messages.
safetensors_file safetensors_from_bytes(std::string_view bytes, const std::string& name_for_errors);

/// load_into over bytes in memory; `name_for_errors` stands in for the path in messages.
void load_into_from_bytes(std::string_view bytes, const std::string& name_for_errors,
                          const std::vector<std::pair<std::string, tensor>>& targets,
                          bool strict = true);

namespace detail {

/// Test hook: while n >= 0, every save_safetensors throws once it has written n bytes of its
/// temporary file, before writing more or renaming it (n = the file's size fails just before
/// the rename); n < 0 turns the hook off. Process-wide, for tests of the failure path only.
void set_safetensors_fail_after_bytes(int64_t n);

} // namespace detail
} // namespace actorch
