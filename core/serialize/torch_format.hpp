// PyTorch's checkpoint format (torch.save since 1.6): a zip archive holding data.pkl, the
// pickled value with each tensor's storage as a persistent id, and data/<key>, each storage's
// bytes. Read with the restricted unpickler (torch.load(weights_only=True)'s rule: Note
// [Restricted unpickling] in pickle.cpp) and written as torch.save writes it, so torch.load
// reads actorch's files and actorch reads torch's. The state-dict files of actorch's commands
// and checkpoints pick this format or safetensors by the file's extension.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/serialize/pickle.hpp"

namespace actorch {

/// torch.load(path, weights_only=True): the value, its tensors on the CPU, views of one
/// storage sharing it. @throws actorch::error naming `path` for a file that is not such a
/// checkpoint: torch's legacy (pre-1.6, non-zip) format by name, a global outside a state
/// dict's (nothing is run), a missing or short storage record.
/// With `locations`, each storage's saved location ("cpu", "cuda:0": where torch.save found it,
/// which torch.load's map_location maps) by the storage it was read into.
using storage_locations = std::map<const storage*, std::string>;
pickle_value torch_load(const std::string& path, storage_locations* locations = nullptr);
pickle_value torch_load_bytes(std::string_view bytes, const std::string& name_for_errors,
                              storage_locations* locations = nullptr);

/// torch.save(value, path): tensors copied to the CPU where they are not there, one storage
/// record per storage (views share theirs). Written atomically (temporary file, fsync, rename).
void torch_save(const std::string& path, const pickle_value& value);
std::string torch_save_bytes(const pickle_value& value);

using named_tensor_list = std::vector<std::pair<std::string, tensor>>;

/// A state dict (OrderedDict or dict of str -> tensor) as a list, in the file's order.
/// @throws actorch::error naming the file and the key for anything else.
named_tensor_list torch_state_dict(const pickle_value& value, const std::string& name);
/// An OrderedDict of `tensors`, as module.state_dict() is pickled.
pickle_value state_dict_value(const named_tensor_list& tensors);

/// Whether `path` names PyTorch's format by its extension (.pt or .pth).
bool torch_checkpoint_path(const std::string& path);

/// A state dict from a file by its extension: .pt or .pth (PyTorch's format) or .safetensors.
/// @throws actorch::error naming the file for another extension.
named_tensor_list load_state_dict_file(const std::string& path);
void save_state_dict_file(const std::string& path, const named_tensor_list& tensors);

} // namespace actorch
